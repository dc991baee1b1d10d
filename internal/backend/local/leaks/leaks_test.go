package leaks

import (
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestScanFindsAndForgets creates real resources named for a sandbox ID (a tmpfs
// mount below its directory, a netns-dir entry, a cgroup-named directory, a
// runtime state directory and a process naming it) and checks that Scan reports
// each one and reports nothing once they are gone.
func TestScanFindsAndForgets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	id := "t" + hex.EncodeToString(b)
	base := t.TempDir()
	o := Options{
		SandboxesDir: filepath.Join(base, "sandboxes"),
		RuntimeRoots: []string{filepath.Join(base, "runc"), filepath.Join(base, "runsc")},
		NetnsDir:     filepath.Join(base, "netns"),
		CgroupRoot:   filepath.Join(base, "cgroup"),
	}
	dir := filepath.Join(o.SandboxesDir, id)
	for _, d := range []string{filepath.Join(dir, "rootfs"), filepath.Join(o.RuntimeRoots[0], id),
		o.NetnsDir, filepath.Join(o.CgroupRoot, "memory", "cubby", id)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(o.NetnsDir, "cubby-"+id), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// runsc keeps "<id>_sandbox:<sandbox>.state" and ".lock" files and a socket.
	if err := os.MkdirAll(o.RuntimeRoots[1], 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{id + "_sandbox:" + id + ".state", id + "_sandbox:" + id + ".lock", "runsc-" + id + ".sock", "other_sandbox:x.state", "runsc-other.sock"} {
		if err := os.WriteFile(filepath.Join(o.RuntimeRoots[1], name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mnt := filepath.Join(dir, "rootfs")
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	cmd := exec.Command("sh", "-c", "read x; : "+id)
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	r, err := Scan(o, id, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Dir || !slices.Contains(r.Mounts, mnt) || len(r.Netns) != 1 || len(r.Cgroups) != 1 ||
		len(r.States) != 4 || !slices.ContainsFunc(r.Processes, func(p string) bool { return strings.HasPrefix(p, strconv.Itoa(cmd.Process.Pid)+" ") }) || !r.Running() || r.Empty() {
		t.Fatalf("scan = %s", r)
	}

	_ = stdin.Close()
	_ = cmd.Wait()
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{o.SandboxesDir, o.RuntimeRoots[0], o.RuntimeRoots[1], o.NetnsDir, o.CgroupRoot} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := Scan(o, id, netip.Addr{}); err != nil || !r.Empty() {
		t.Fatalf("after cleanup: %s %v", r, err)
	}
}
