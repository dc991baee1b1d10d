package template

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBuildReal builds a small template with the real mmdebstrap (minbase +
// python3 + pip + one package), checks the tree, the cache, immutability across a
// forced rebuild, Prune, and — concurrently with the rebuild — that a cancelled
// build leaves nothing behind.
func TestBuildReal(t *testing.T) {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("mmdebstrap not installed")
	}
	if os.Geteuid() != 0 {
		t.Fatal("template builds run mmdebstrap in root mode; run the tests as root")
	}
	name := fmt.Sprintf("t%08x", rand.Uint32())
	def := testDefinition(t, name)
	m := NewManager(t.TempDir(), nil)
	var progress bytes.Buffer
	info, err := m.Build(context.Background(), def, &progress, false)
	if err != nil {
		t.Fatalf("build: %v\nprogress:\n%s", err, progress.String())
	}
	checkProgress(t, progress.String())
	checkBuildLog(t, m, info, progress.String())
	checkTree(t, info)
	checkInSandbox(t, info.RootfsDir)
	before := fingerprint(t, filepath.Dir(info.RootfsDir))

	var again bytes.Buffer
	cached, err := m.Build(context.Background(), def, &again, false)
	if err != nil || cached.RootfsDir != info.RootfsDir || !cached.BuiltAt.Equal(info.BuiltAt) ||
		!strings.Contains(again.String(), "cached") {
		t.Fatalf("rebuild not served from cache: %+v %v %q", cached, err, again.String())
	}

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); testCancelledBuild(t, name+"c") }()
	forced, err := m.Build(context.Background(), def, nil, true)
	wg.Wait()
	if err != nil {
		t.Fatalf("forced rebuild: %v", err)
	}
	if forced.RootfsDir == info.RootfsDir || forced.Digest != info.Digest {
		t.Fatalf("forced rebuild reused the tree: %s", forced.RootfsDir)
	}
	if got, err := m.Get(name); err != nil || got.RootfsDir != forced.RootfsDir {
		t.Fatalf("Get after rebuild = %+v, %v", got, err)
	}
	if after := fingerprint(t, filepath.Dir(info.RootfsDir)); after != before {
		t.Fatal("old tree was modified by the rebuild")
	}
	removed, err := m.Prune(context.Background(), nil)
	if err != nil || len(removed) != 1 || removed[0] != info.RootfsDir {
		t.Fatalf("Prune = %v, %v", removed, err)
	}
}

func testDefinition(t *testing.T, name string) Definition {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "hello.sh"), "#!/bin/sh\necho hello from cubby\n", 0o755)
	write(t, filepath.Join(dir, DefinitionFile), `
name: `+name+`
variant: minbase
packages: [less, iputils-ping]
pip: [six==1.16.0]
files:
  /usr/local/bin/hello-cubby: hello.sh
  /home/user/.config/cubby/note.txt:
    content: "note\n"
  /home/user/root-owned:
    content: "x"
    owner: root
    mode: "0600"
env:
  FOO: bar baz
run:
  - echo "ran as $(id -un) FOO=$FOO" > /etc/cubby-run-marker
  - hello-cubby >> /etc/cubby-run-marker
`, 0o644)
	def, err := LoadDefinition(dir)
	if err != nil {
		t.Fatal(err)
	}
	return def
}

func checkProgress(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{"[1/5] debootstrap bookworm (minbase, 10 packages)", "I: ", "[3/5] pip install",
		"removed file capabilities sandboxes cannot grant from /usr/bin/ping",
		"Successfully installed six", "+ hello-cubby", "[5/5] commit", "built template"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress lacks %q:\n%s", want, out)
		}
	}
}

func checkTree(t *testing.T, info Info) {
	t.Helper()
	r := info.RootfsDir
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(r, p))
		if err != nil {
			t.Error(err)
		}
		return string(b)
	}
	if !strings.Contains(read("/etc/passwd"), "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("passwd lacks user:\n%s", read("/etc/passwd"))
	}
	if got := read("/etc/sudoers.d/90-cubby-user"); got != "user ALL=(ALL:ALL) NOPASSWD: ALL\n" {
		t.Errorf("sudoers = %q", got)
	}
	if got := read("/etc/cubby-run-marker"); got != "ran as root FOO=bar baz\nhello from cubby\n" {
		t.Errorf("run marker = %q", got)
	}
	if got := read("/etc/environment"); !strings.Contains(got, "FOO=\"bar baz\"\n") {
		t.Errorf("/etc/environment = %q", got)
	}
	for p, want := range map[string]string{
		"/etc/sudoers.d/90-cubby-user":      "440 0:0",
		"/home/user":                        "755 1000:1000",
		"/home/user/.config/cubby":          "755 1000:1000",
		"/home/user/.config/cubby/note.txt": "644 1000:1000",
		"/home/user/root-owned":             "600 0:0",
		"/usr/local/bin/hello-cubby":        "755 0:0",
	} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(r, p), &st); err != nil {
			t.Error(err)
			continue
		}
		if got := fmt.Sprintf("%o %d:%d", st.Mode&0o7777, st.Uid, st.Gid); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
	for _, p := range []string{"/usr/bin/python", "/usr/bin/python3", "/usr/bin/sudo", "/usr/bin/less"} {
		if _, err := os.Stat(filepath.Join(r, p)); err != nil {
			t.Error(err)
		}
	}
	if _, err := unix.Lgetxattr(filepath.Join(r, "usr/bin/ping"), xattrCaps, make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("ping keeps file capabilities sandboxes cannot grant: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(r, "usr/local/lib/python3*/dist-packages/six.py")); len(m) != 1 {
		t.Error("pip package six not installed")
	}
	if e, _ := os.ReadDir(filepath.Join(r, "tmp")); len(e) != 0 {
		t.Errorf("/tmp not empty: %v", e)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(r), infoFile)); err != nil {
		t.Error(err)
	}
	if info.SizeBytes < 50<<20 || info.Workdir != "/home/user" || info.User != "user" {
		t.Errorf("info = %+v", info)
	}
}

// checkInSandbox mounts the tree as the read-only lower layer of an overlay in a
// private mount namespace (as a sandbox would) and runs commands as the user.
func checkInSandbox(t *testing.T, rootfs string) {
	t.Helper()
	tmp := t.TempDir()
	script := `set -e
mkdir -p "$T/u" "$T/w" "$T/m"
mount -t overlay ovl-t -o lowerdir="$R",upperdir="$T/u",workdir="$T/w" "$T/m"
mount -t proc proc "$T/m/proc"
grep "^hosts:.*myhostname" "$T/m/etc/nsswitch.conf" >/dev/null
chroot "$T/m" runuser -u user -- /bin/bash -c 'cd && pwd && id -u && sudo -n id -u && python -c "import six; print(six.__version__)" && hello-cubby'`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	cmd.Env = append(os.Environ(), "T="+tmp, "R="+rootfs)
	out, err := cmd.CombinedOutput()
	want := "/home/user\n1000\n0\n1.16.0\nhello from cubby\n"
	if err != nil || string(out) != want {
		t.Errorf("in-sandbox check: %v\ngot  %q\nwant %q", err, out, want)
	}
}

// testCancelledBuild cancels a build once packages are being installed in the
// chroot and checks that no files, mounts or processes remain.
func testCancelledBuild(t *testing.T, name string) {
	m := NewManager(t.TempDir(), nil)
	def := Definition{Name: name}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelWriter{cancel: cancel, trigger: "I: installing essential packages"}
	_, err := m.Build(ctx, def, w, false)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled build err = %v (triggered=%v)", err, w.fired())
		return
	}
	if e, err := os.ReadDir(m.stagingDir()); err != nil || len(e) != 0 {
		t.Errorf("staging not empty after cancel: %v %v", e, err)
	}
	if _, err := os.Stat(filepath.Join(m.dir, IDFor(name))); !os.IsNotExist(err) {
		t.Errorf("template dir exists after cancel: %v", err)
	}
	if _, err := m.Get(name); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after cancel: %v", err)
	}
	if mounts, err := mountsUnder(m.dir); err != nil || len(mounts) != 0 {
		t.Errorf("mounts left: %v %v", mounts, err)
	}
	if procs := processesMentioning(m.dir); len(procs) != 0 {
		t.Errorf("processes left: %v", procs)
	}
}

type cancelWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	trigger string
	cancel  func()
	done    bool
}

func (w *cancelWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if !w.done && strings.Contains(w.buf.String(), w.trigger) {
		w.done = true
		w.cancel()
	}
	return len(b), nil
}

func (w *cancelWriter) fired() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.done
}

// processesMentioning lists host processes whose command line contains s.
func processesMentioning(s string) []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			out = append(out, filepath.Base(d)+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}

// fingerprint hashes every path, mode, owner, size, mtime and link target of a tree.
func fingerprint(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		link, _ := os.Readlink(p)
		fmt.Fprintf(h, "%s %o %d:%d %d %d %s\n", p, st.Mode, st.Uid, st.Gid, st.Size, fi.ModTime().UnixNano(), link)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkBuildLog: the build kept its output as the tree's build log.
func checkBuildLog(t *testing.T, m *Manager, info Info, progress string) {
	t.Helper()
	entries, err := m.BuildLog(info.Name, info.BuildID())
	if err != nil || len(entries) < 3 {
		t.Fatalf("build log: %d entries, %v", len(entries), err)
	}
	for _, e := range entries[:3] {
		if !strings.Contains(progress, e.Message) {
			t.Fatalf("build log line %q is not in the build's output", e.Message)
		}
	}
	if last := entries[len(entries)-1].Message; !strings.HasPrefix(last, "build finished in ") {
		t.Fatalf("last build log line %q", last)
	}
}
