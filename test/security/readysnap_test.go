package security

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// TestTemplateSnapshotHoldsNoBuildCredential (gVisor): a template whose
// start command became ready at build end starts its sandboxes from a
// memory snapshot of the ready sandbox, and that memory carries nothing of
// the build's credentials: the server's proxy credential, which every build
// step gets (the step proves it saw it), is neither in the memory image
// (every process's pages and the gVisor kernel's state) nor in any process
// environment or file of a sandbox of the template, where root looks for it.
// Each sandbox restores the same start-command state (the value its process
// wrote once, at build end) under its own hostname, and its agent, captured
// before any credential existed, answers only the sandbox's own link
// credential: root inside cannot call it without it.
func TestTemplateSnapshotHoldsNoBuildCredential(t *testing.T) {
	if !hasRunsc(t) {
		t.Skip("needs bin/runsc next to CUBBY_BIN")
	}
	secret := "cbproxy" + testserver.RandHex(12)
	// ALL_PROXY reaches build steps and sandboxes (with --sandbox-outbound
	// only); the server's own Go clients do not use it.
	t.Setenv("ALL_PROXY", "socks5h://cubby:"+secret+"@127.0.0.1:9")
	s := startServer(t, "--runtime", "runsc")
	res := s.mustBuild(t, "snap-creds", map[string]any{"fromTemplate": "base",
		"steps":    []map[string]any{{"type": "RUN", "args": []string{`case "$ALL_PROXY" in *` + secret + `*) echo build-step-holds-proxy-credential;; esac`}}},
		"startCmd": `exec python3 -c 'import uuid, time; open("/tmp/started", "w").write(uuid.uuid4().hex); time.sleep(1e9)'`,
		"readyCmd": "test -s /tmp/started"}, "ready")
	if !strings.Contains(res.LogText(), "build-step-holds-proxy-credential") {
		t.Fatalf("the build step did not get the proxy credential; nothing to look for:\n%s", res.LogText())
	}
	images := readGlob(t, filepath.Join(s.DataDir, "snapshots", "tmpl*", "checkpoint", "*"))
	if len(images) == 0 {
		t.Fatalf("no memory image of the template's ready sandbox: nothing was captured\n%s", res.LogText())
	}
	if in := imagesHold(images, secret); len(in) > 0 {
		t.Errorf("the template's memory image holds the build's proxy credential: %v", in)
	}
	var first string
	for i := range 2 {
		sbx := s.createWith(t, &sdk.CreateOptions{Template: "snap-creds"})
		out := asRoot(t, sbx, "cat /tmp/started; echo; hostname").Out
		started, host, _ := strings.Cut(strings.TrimSpace(out), "\n")
		if i == 0 {
			first = started
		} else if started != first || started == "" {
			t.Errorf("sandbox %d: start command state %q, want the snapshot's %q", i, started, first)
		}
		if host != sbx.ID() {
			t.Errorf("sandbox %d: hostname %q, want its ID %s", i, host, sbx.ID())
		}
		if leak := asRoot(t, sbx, fmt.Sprintf("grep -lsF %q /proc/[0-9]*/environ; grep -rlsF %q /run /root /home /tmp /etc /var /opt 2>/dev/null; true", secret, secret)); leak.Out != "" {
			t.Errorf("sandbox %d: the build's proxy credential in %q", i, leak.Out)
		}
		probe := asRoot(t, sbx, fmt.Sprintf(`for tok in "" %q; do curl -s -o /dev/null -w '%%{http_code} ' -H "X-Access-Token: $tok" http://127.0.0.1:%d/envs; done`,
			agentapi.LinkToken(sbx.AccessToken()), agentapi.EnvdPort))
		if got := strings.Fields(probe.Out); len(got) != 2 || got[0] != "401" || got[1] != "200" {
			t.Errorf("sandbox %d: its agent answers %q without a credential and with its own, want 401 and 200", i, probe.Out)
		}
	}
}
