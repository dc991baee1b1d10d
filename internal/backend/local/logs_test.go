package local

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.log")
	content := `{"time":"2026-01-02T03:04:05Z","level":"INFO","msg":"starting"}
{"time":"2026-01-02T03:04:06Z","level":"INFO","msg":"listening","addr":"0.0.0.0:49983"}
plain text line

{"time":"2026-01-02T03:04:08Z","level":"WARN","msg":"late"}
`
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := readLogTail(p, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 || !strings.Contains(all[1].Line, "listening") || all[2].Line != "plain text line" {
		t.Fatalf("lines = %+v", all)
	}
	if !all[0].Timestamp.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("timestamp = %v", all[0].Timestamp)
	}
	since, err := readLogTail(p, time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC), 2)
	if err != nil {
		t.Fatal(err)
	}
	// "listening", the plain line (mtime, now) and "late" match; limit keeps the last two.
	if len(since) != 2 || since[0].Line != "plain text line" || !strings.Contains(since[1].Line, "late") {
		t.Fatalf("since/limit lines = %+v", since)
	}
}

func TestReadLogTailBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.log")
	line := strings.Repeat("x", 1023) + "\n"
	if err := os.WriteFile(p, []byte(strings.Repeat(line, 2*maxLogTail/len(line))), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readLogTail(p, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got); n == 0 || n > maxLogTail/len(line) {
		t.Fatalf("read %d lines, want at most %d", n, maxLogTail/len(line))
	}
	for _, l := range got {
		if len(l.Line) != 1023 {
			t.Fatalf("partial line of %d bytes", len(l.Line))
		}
	}
}

func TestReadLogTailMissing(t *testing.T) {
	if _, err := readLogTail(filepath.Join(t.TempDir(), "nope"), time.Time{}, 0); err == nil {
		t.Fatal("missing log: want an error")
	}
}

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

func TestSandboxLogsMergesKernelLogs(t *testing.T) {
	dir := t.TempDir()
	agentLog := writeFile(t, dir, "agent.log", `{"time":"2026-01-02T03:04:05Z","level":"INFO","msg":"agent starting"}
{"time":"2026-01-02T03:04:09Z","level":"INFO","msg":"agent later"}
`)
	root := filepath.Join(dir, "rootfs")
	kdir := filepath.Join(root, "run/cubby/kernels")
	writeFile(t, kdir, "ctx1.log", `{"time":"2026-01-02T03:04:07Z","level":"INFO","msg":"kernel says","source":"kernel","context":"ctx1"}
`)
	writeFile(t, kdir, "zygote.log", "late preload numpy: 300 ms\n"+
		`{"time":"2026-01-02T03:04:06Z","level":"INFO","msg":"stamped"}`+"\nafter stamped\n")
	writeFile(t, kdir, "notes.txt", `{"time":"2026-01-02T03:04:08Z","msg":"not a .log"}`+"\n")
	got, err := sandboxLogs(agentLog, root, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, l := range got {
		order = append(order, l.Line)
	}
	want := []string{
		`{"time":"2026-01-02T03:04:05Z","level":"INFO","msg":"agent starting"}`,
		"late preload numpy: 300 ms", // a leading plain line takes the next stamp
		`{"time":"2026-01-02T03:04:06Z","level":"INFO","msg":"stamped"}`,
		"after stamped", // a plain line takes the previous stamp
		`{"time":"2026-01-02T03:04:07Z","level":"INFO","msg":"kernel says","source":"kernel","context":"ctx1"}`,
		`{"time":"2026-01-02T03:04:09Z","level":"INFO","msg":"agent later"}`,
	}
	if strings.Join(order, "\n") != strings.Join(want, "\n") {
		t.Fatalf("merged lines:\n%s\nwant:\n%s", strings.Join(order, "\n"), strings.Join(want, "\n"))
	}
	last, err := sandboxLogs(agentLog, root, time.Date(2026, 1, 2, 3, 4, 7, 0, time.UTC), 1)
	if err != nil || len(last) != 1 || !strings.Contains(last[0].Line, "agent later") {
		t.Fatalf("since/limit = %+v, %v", last, err)
	}
	// No rootfs (a paused sandbox): the agent log alone.
	if only, err := sandboxLogs(agentLog, filepath.Join(dir, "missing"), time.Time{}, 0); err != nil || len(only) != 2 {
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
