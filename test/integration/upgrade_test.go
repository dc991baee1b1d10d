package integration

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// upgradeCase is one sandbox a release before this one starts, and how it
// waits for the upgrade: running, or paused with keepMemory (nil = the
// runtime's default: frozen under runc, a checkpoint image under runsc).
type upgradeCase struct {
	name, template string
	pause          bool
	keepMemory     *bool
}

// TestUpgradeRekeysAgents: sandboxes started by the release before the
// gateway held the client credentials (binary CUBBY_BASELINE_BIN) run agents
// that take the clients' access token, not the link credential today's
// gateway forwards. After the server binary is replaced in place (the
// agent's bind mount source too) and restarted on the same data dir, every
// one of them works through the SDK at once: commands, files and, in a
// code-interpreter sandbox, the interpreter on port 49999 with its kernel's
// memory; running ones are re-keyed at adoption, paused ones (frozen, stopped
// on disk, gVisor checkpoint) at resume.
func TestUpgradeRekeysAgents(t *testing.T) {
	old := os.Getenv("CUBBY_BASELINE_BIN")
	if old == "" {
		t.Skip("CUBBY_BASELINE_BIN (the previous release's cubby binary) is not set")
	}
	fs := false
	t.Run("runc", func(t *testing.T) {
		testUpgrade(t, old, "runc", []upgradeCase{
			{name: "running", template: "base"},
			{name: "interpreter", template: "code-interpreter"},
			{name: "frozen", template: "base", pause: true},
			{name: "disk", template: "base", pause: true, keepMemory: &fs},
		})
	})
	// gVisor sandboxes of the previous release are not adoptable for
	// network reasons, whatever their credential: one left running had its
	// host link on the bridge, today's server routes it (IFF_NOARP, its own
	// MAC) and gVisor's network stack keeps the gateway MAC it learnt by
	// ARP, so the host cannot reach its agent; a checkpointed one fails to
	// restore (runsc: "configuring network: AddProtocolAddress ...:
	// duplicate address"). Only runc sandboxes are tested here.
}

func testUpgrade(t *testing.T, oldBin, rt string, cases []upgradeCase) {
	newBin := os.Getenv("CUBBY_BIN")
	dir := t.TempDir()
	// The agent runs this binary inside user namespaces: its directories must
	// be searchable by the sandboxes' unprivileged host ids.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "cubby")
	copyExecutable(t, oldBin, bin)
	t.Setenv("CUBBY_BIN", bin)
	// Both releases run the pinned runc (the copy of the binary has none next
	// to it, and the distribution's cannot idmap mounts for user namespaces).
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbup", Args: []string{"--runtime", rt,
		"--runc", repoBinary(t, "runc", "CUBBY_RUNC"), "--runsc", runscBinary(t)}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sbxs := make([]*sdk.Sandbox, len(cases))
	for i, c := range cases {
		sbx := ts.Create(t, &sdk.CreateOptions{Template: c.template, Timeout: 20 * time.Minute})
		sbxs[i] = sbx
		if _, err := sbx.Files.Write(ctx, "/home/user/note", []byte("before "+c.name), nil); err != nil {
			t.Fatalf("%s: write before the upgrade: %v", c.name, err)
		}
		if c.template == "code-interpreter" {
			if _, err := sbx.RunCode(ctx, "x = 41", nil); err != nil {
				t.Fatalf("%s: run code before the upgrade: %v", c.name, err)
			}
		}
		if c.pause {
			if _, err := sbx.Pause(ctx, &sdk.PauseOptions{KeepMemory: c.keepMemory}); err != nil {
				t.Fatalf("%s: pause: %v", c.name, err)
			}
		}
	}
	ts.Kill9()
	copyExecutable(t, newBin, bin+".new")
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	if err := ts.Restart(); err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		useAfterUpgrade(ctx, t, ts, sbxs[i], c)
	}
	if !strings.Contains(ts.Log(), "re-keyed") {
		t.Errorf("the server log names no re-keyed agent")
	}
}

// useAfterUpgrade resumes sbx when c paused it and uses it through the SDK.
func useAfterUpgrade(ctx context.Context, t *testing.T, ts *testserver.Server, sbx *sdk.Sandbox, c upgradeCase) {
	t.Helper()
	if c.pause {
		if err := sbx.Resume(ctx, &sdk.ResumeOptions{Timeout: 10 * time.Minute}); err != nil {
			t.Fatalf("%s: resume after the upgrade: %v\n%s", c.name, err, ts.Log())
		}
	}
	res, err := sbx.Commands.Run(ctx, "cat /home/user/note && echo ok > /home/user/after", nil)
	if err != nil || res.ExitCode != 0 || res.Stdout != "before "+c.name {
		t.Fatalf("%s: command after the upgrade: %+v %v\n%s", c.name, res, err, ts.Log())
	}
	got, err := sbx.Files.ReadString(ctx, "/home/user/after", nil)
	if err != nil || got != "ok\n" {
		t.Fatalf("%s: read after the upgrade: %q %v", c.name, got, err)
	}
	if c.template != "code-interpreter" {
		return
	}
	exec, err := sbx.RunCode(ctx, "x + 1", nil)
	if err != nil || exec.Error != nil || exec.Text() != "42" {
		t.Fatalf("%s: interpreter after the upgrade (its kernel kept x = 41): %+v %v", c.name, exec, err)
	}
}

// copyExecutable copies the file src to a new executable dst.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
