package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// TestSandboxCommands drives create, list, info, pause, resume and kill.
func TestSandboxCommands(t *testing.T) {
	s := need(t)
	suite := "cli-" + randHex(4)
	a := s.newSandbox(t, "--template", "base", "--metadata", "suite="+suite, "--metadata", "n=1",
		"--env", "FOO=from-create", "--timeout", "10m")
	if a.State != "running" || a.Metadata["suite"] != suite || a.Metadata["n"] != "1" || a.Alias != "base" {
		t.Fatalf("create --json: %+v", a)
	}
	if left := time.Until(a.EndAt); left < 8*time.Minute || left > 11*time.Minute {
		t.Errorf("--timeout 10m: sandbox ends in %s", left)
	}

	// Human create prints the ID alone on stdout.
	r := s.cli(t, runOpts{}, "sandbox", "create", "--metadata", "suite="+suite)
	if r.code != 0 {
		t.Fatalf("create: %s", r)
	}
	b := strings.TrimSpace(r.stdout)
	t.Cleanup(func() { s.cli(t, runOpts{}, "sandbox", "kill", b) })
	if !isID(b) || !strings.Contains(r.stderr, "cubby shell "+b) {
		t.Fatalf("create: %s", r)
	}

	// Environment from create reaches commands.
	if out := s.ok(t, "exec", a.SandboxID, "--", "echo $FOO"); out != "from-create\n" {
		t.Errorf("env from create: %q", out)
	}

	table := s.ok(t, "sandbox", "list")
	if !strings.HasPrefix(table, "ID ") || !strings.Contains(table, a.SandboxID) || !strings.Contains(table, b) ||
		!strings.Contains(table, "n=1,suite="+suite) {
		t.Errorf("list table:\n%s", table)
	}
	listed := decode[[]sandboxInfo](t, s.ok(t, "sandbox", "list", "--json", "--metadata", "suite="+suite))
	if ids := idsOf(listed); len(ids) != 2 || !ids[a.SandboxID] || !ids[b] {
		t.Errorf("list --metadata suite=%s: %v", suite, ids)
	}
	if one := decode[[]sandboxInfo](t, s.ok(t, "sandbox", "list", "--json", "--metadata", "n=1")); len(one) != 1 || one[0].SandboxID != a.SandboxID {
		t.Errorf("list --metadata n=1: %+v", one)
	}
	if lim := decode[[]sandboxInfo](t, s.ok(t, "sandbox", "list", "--json", "--limit", "1")); len(lim) != 1 {
		t.Errorf("list --limit 1: %d sandboxes", len(lim))
	}

	info := decode[sandboxInfo](t, s.ok(t, "sandbox", "info", a.SandboxID, "--json"))
	if info.SandboxID != a.SandboxID || info.State != "running" || info.Metadata["suite"] != suite {
		t.Errorf("info --json: %+v", info)
	}
	if human := s.ok(t, "sandbox", "info", a.SandboxID); !strings.Contains(human, "State:") || !strings.Contains(human, "running") {
		t.Errorf("info:\n%s", human)
	}

	testPauseResume(t, s, a.SandboxID, suite)

	out := s.ok(t, "sandbox", "kill", a.SandboxID, b)
	if out != fmt.Sprintf("killed %s\nkilled %s\n", a.SandboxID, b) {
		t.Errorf("kill: %q", out)
	}
	r = s.cli(t, runOpts{}, "sandbox", "info", a.SandboxID)
	if r.code != 1 || !strings.Contains(r.stderr, "not found") || !strings.Contains(r.stderr, "cubby sandbox list") {
		t.Errorf("info after kill: %s", r)
	}
	r = s.cli(t, runOpts{}, "sandbox", "kill", a.SandboxID)
	if r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("kill of a killed sandbox: %s", r)
	}
}

// testPauseResume pauses and resumes id; a file written before survives.
func testPauseResume(t *testing.T, s *server, id, suite string) {
	t.Helper()
	s.ok(t, "exec", id, "--", "echo kept > /tmp/kept")
	r := s.cli(t, runOpts{}, "sandbox", "pause", id)
	if r.code != 0 {
		t.Fatalf("pause: %s", r)
	}
	if r.stdout != "paused "+id+"\n" {
		t.Errorf("pause: %q", r.stdout)
	}
	if st := decode[sandboxInfo](t, s.ok(t, "sandbox", "info", id, "--json")).State; st != "paused" {
		t.Errorf("state after pause: %s", st)
	}
	paused := decode[[]sandboxInfo](t, s.ok(t, "sandbox", "list", "--json", "--state", "paused", "--metadata", "suite="+suite))
	if ids := idsOf(paused); len(ids) != 1 || !ids[id] {
		t.Errorf("list --state paused: %v", ids)
	}
	if out := s.ok(t, "sandbox", "pause", id); out != "already paused "+id+"\n" {
		t.Errorf("second pause: %q", out)
	}
	if out := s.ok(t, "sandbox", "resume", id); out != "resumed "+id+"\n" {
		t.Errorf("resume: %q", out)
	}
	if st := decode[sandboxInfo](t, s.ok(t, "sandbox", "info", id, "--json")).State; st != "running" {
		t.Errorf("state after resume: %s", st)
	}
	if out := s.ok(t, "exec", id, "--", "cat /tmp/kept"); out != "kept\n" {
		t.Errorf("file after resume: %q", out)
	}
}

func idsOf(list []sandboxInfo) map[string]bool {
	ids := map[string]bool{}
	for _, sb := range list {
		ids[sb.SandboxID] = true
	}
	return ids
}

func isID(s string) bool {
	return s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789") == ""
}

// TestErrorMessages checks that a wrong key, a missing key and an unreachable
// server produce messages that say what to do.
func TestErrorMessages(t *testing.T) {
	s := need(t)
	api := "E2B_API_URL=http://" + s.Addr
	r := s.cli(t, runOpts{env: []string{"E2B_API_KEY=e2b_" + strings.Repeat("0", 40), api}}, "sandbox", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "rejected the API key") || !strings.Contains(r.stderr, "E2B_API_KEY") {
		t.Errorf("wrong key: %s", r)
	}
	r = s.cli(t, runOpts{env: []string{api}}, "sandbox", "create")
	if r.code != 1 || !strings.Contains(r.stderr, "no API key") || !strings.Contains(r.stderr, "cubby keys create") {
		t.Errorf("no key: %s", r)
	}
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("http://127.0.0.1:%d", port)
	r = s.cli(t, runOpts{env: []string{"E2B_API_KEY=" + s.Key}}, "sandbox", "list", "--api-url", dead)
	if r.code != 1 || !strings.Contains(r.stderr, "is cubby serve running at "+dead) {
		t.Errorf("unreachable server: %s", r)
	}
	r = s.cli(t, runOpts{}, "sandbox", "create", "--template", "no-such-template-"+randHex(3))
	if r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("unknown template: %s", r)
	}
	r = s.cli(t, runOpts{}, "sandbox", "list", "--state", "sleeping")
	if r.code != 1 || !strings.Contains(r.stderr, "want running or paused") {
		t.Errorf("bad --state: %s", r)
	}
}
