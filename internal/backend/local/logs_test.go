package local

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/sandboxlog"
)

// writeFile writes content to dir/name, creating parents.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSandboxLogsMergesKernelLogs merges the output log (host-stamped) with
// the kernel logs (stamped by their records), every line labelled.
func TestSandboxLogsMergesKernelLogs(t *testing.T) {
	dir := t.TempDir()
	out, err := sandboxlog.Open(dir, sandboxlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out.Note(slog.LevelInfo, "container started")
	w, err := out.WriteEnd()
	if err != nil {
		t.Fatal(err)
	}
	w.WriteString(`{"level":"INFO","msg":"agent says","source":"host"}` + "\n")
	w.Close()
	root := filepath.Join(dir, "rootfs")
	kdir := filepath.Join(root, "run/cubby/kernels")
	writeFile(t, kdir, "ctx1.log", `{"time":"2026-01-02T03:04:07Z","level":"INFO","msg":"kernel says","source":"kernel","context":"ctx1"}
`)
	writeFile(t, kdir, "zygote.log", "late preload numpy: 300 ms\n"+
		`{"time":"2026-01-02T03:04:06Z","level":"INFO","msg":"stamped","source":"host"}`+"\nafter stamped\n")
	writeFile(t, kdir, "notes.txt", `{"time":"2026-01-02T03:04:08Z","msg":"not a .log"}`+"\n")
	var got []backend.LogLine
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if got, err = sandboxLogs(dir, root, time.Time{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	out.Close()
	var order []string
	for _, l := range got {
		order = append(order, l.Source+" "+l.Line)
	}
	want := []string{
		"kernel late preload numpy: 300 ms", // a leading plain line takes the next stamp
		`kernel {"source":"kernel","time":"2026-01-02T03:04:06Z","level":"INFO","msg":"stamped"}`,
		"kernel after stamped", // a plain line takes the previous stamp
		`kernel {"source":"kernel","time":"2026-01-02T03:04:07Z","level":"INFO","msg":"kernel says","context":"ctx1"}`,
	}
	if len(order) != 6 || strings.Join(order[:4], "\n") != strings.Join(want, "\n") ||
		!strings.HasPrefix(order[4], `host {"source":"host",`) || order[5] != `sandbox {"source":"sandbox","level":"INFO","msg":"agent says"}` {
		t.Fatalf("merged lines:\n%s\nwant:\n%s\nthen the host and the sandbox line", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
	last, err := sandboxLogs(dir, root, time.Date(2026, 1, 2, 3, 4, 7, 0, time.UTC), 1)
	if err != nil || len(last) != 1 || !strings.Contains(last[0].Line, "agent says") {
		t.Fatalf("since/limit = %+v, %v", last, err)
	}
	// No rootfs (a paused sandbox): the output log alone.
	if only, err := sandboxLogs(dir, filepath.Join(dir, "missing"), time.Time{}, 0); err != nil || len(only) != 2 {
		t.Fatalf("without rootfs = %+v, %v", only, err)
	}
}

// TestKernelLogsStayInRootfs checks that links, FIFOs and directories a
// sandbox plants among its kernel logs are never read (nor block) on the host.
func TestKernelLogsStayInRootfs(t *testing.T) {
	dir := t.TempDir()
	secret := writeFile(t, dir, "host/secret.log", `{"time":"2026-01-02T03:04:05Z","msg":"HOST SECRET"}`+"\n")
	root := filepath.Join(dir, "rootfs")
	kdir := filepath.Join(root, "run/cubby/kernels")
	writeFile(t, kdir, "ok.log", `{"time":"2026-01-02T03:04:05Z","msg":"fine"}`+"\n")
	mustDo(t, os.Symlink(secret, filepath.Join(kdir, "abs.log")))
	mustDo(t, os.Symlink("../../../../host/secret.log", filepath.Join(kdir, "rel.log")))
	mustDo(t, syscall.Mkfifo(filepath.Join(kdir, "fifo.log"), 0o600))
	mustDo(t, os.Mkdir(filepath.Join(kdir, "dir.log"), 0o755))
	lines := kernelLogs(root)
	if len(lines) != 1 || !strings.Contains(lines[0].Line, "fine") {
		t.Fatalf("kernel logs = %+v, want only ok.log", lines)
	}
	// The whole log directory replaced by a link out of the rootfs.
	evil := filepath.Join(dir, "evil")
	mustDo(t, os.MkdirAll(filepath.Join(evil, "run"), 0o755))
	mustDo(t, os.Symlink(filepath.Join(dir, "host"), filepath.Join(evil, "run/cubby")))
	if lines := kernelLogs(evil); len(lines) != 0 {
		t.Fatalf("kernel logs through an escaping link = %+v", lines)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
