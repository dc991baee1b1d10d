package bootid

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestWrite(t *testing.T) {
	file := filepath.Join(t.TempDir(), "boot_id")
	a, err := Write(file)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil || string(data) != a+"\n" || !uuidRe.MatchString(a) {
		t.Fatalf("boot id file %q (err %v), id %q", data, err, a)
	}
	if st, _ := os.Stat(file); st.Mode().Perm() != 0o444 {
		t.Errorf("mode %v, want 0444", st.Mode().Perm())
	}
	b, err := Write(file)
	if err != nil || b == a {
		t.Fatalf("second Write = %q, %v (first %q)", b, err, a)
	}
	if entries, _ := os.ReadDir(filepath.Dir(file)); len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestHook(t *testing.T) {
	h := Hook("/usr/bin/cubby", "/run/x/boot_id", "/run/x/rootfs")
	want := []string{"/usr/bin/cubby", "oci-hook", "boot-id", "/run/x/boot_id", "/run/x/rootfs"}
	if h.Path != "/usr/bin/cubby" || strings.Join(h.Args, " ") != strings.Join(want, " ") {
		t.Fatalf("Hook = %+v", h)
	}
}

// TestRunHook mounts a procfs under a fake root filesystem in a private mount
// namespace (needs root) and checks that the hook binds the file read-only over
// its boot_id, and refuses a boot_id that is not on procfs.
func TestRunHook(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount namespace, procfs mount)")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // the thread dies with its private mount namespace
		if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
			t.Errorf("unshare: %v", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Errorf("make / private: %v", err)
			return
		}
		checkHook(t)
	}()
	<-done
}

func checkHook(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("proc", filepath.Join(root, "proc"), "proc", 0, ""); err != nil {
		t.Errorf("mount proc: %v", err)
		return
	}
	file := filepath.Join(t.TempDir(), "boot_id")
	id, err := Write(file)
	if err != nil {
		t.Error(err)
		return
	}
	if err := RunHook(file, root); err != nil {
		t.Errorf("RunHook: %v", err)
		return
	}
	target := filepath.Join(root, Path)
	if got, err := os.ReadFile(target); err != nil || string(got) != id+"\n" {
		t.Errorf("boot_id after the hook = %q (err %v), want %q", got, err, id)
	}
	if host, _ := os.ReadFile(Path); string(host) == id+"\n" {
		t.Error("the host's boot_id changed")
	}
	if err := os.WriteFile(target, []byte("x\n"), 0); err == nil {
		t.Error("the bound boot_id is writable")
	}

	fake := t.TempDir()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(fake, Path)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fake, Path), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := RunHook(file, fake); err == nil || !strings.Contains(err.Error(), "not on procfs") {
		t.Errorf("RunHook on a non-procfs boot_id = %v, want a procfs error", err)
	}
	// A root whose /proc is a symbolic link (to the procfs above) is refused.
	linked := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "proc"), filepath.Join(linked, "proc")); err != nil {
		t.Fatal(err)
	}
	if err := RunHook(file, linked); err == nil {
		t.Error("RunHook through a symlinked /proc succeeded")
	}
	if err := RunHook(file, "relative/root"); err == nil {
		t.Error("RunHook with a relative root succeeded")
	}
}
