package mountns

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

func TestToDrop(t *testing.T) {
	k := Keep{Trees: []string{"/tmp/cubby-cluster-1", "/run/netns/cbk1"}, Paths: []string{"/usr", "/etc/resolv.conf"}}
	points := []string{
		"/", "/proc", "/proc/sys/vm/overcommit_memory", "/sys", "/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/dev",
		"/dev/shm", "/run", "/run/netns", "/run/netns/cbk1", "/run/netns/cbsec1", "/run/cubby/ab12/s1/rootfs",
		"/tmp", "/tmp/cubby-cluster-1/node/kubelet/pods/x", "/tmp/TestPause1/001/sandboxes/s1/layer",
		"/tmp/TestPause1/001/sandboxes/s1/layer", "/tmp/TestPause1/001/sandboxes/s1/layer/upper/x",
		"/var/lib/cubby/sandboxes/s2/layer", "/usr", "/usr/local/share", "/etc/resolv.conf", "/mnt/other",
		"/tmp/cubby-cluster-10/node",
	}
	got := k.ToDrop(points)
	want := []string{
		"/tmp/TestPause1/001/sandboxes/s1/layer/upper/x", // deepest first
		"/var/lib/cubby/sandboxes/s2/layer",              // equal depth: last mounted first
		"/tmp/TestPause1/001/sandboxes/s1/layer",         // stacked: once per mount
		"/tmp/TestPause1/001/sandboxes/s1/layer",
		"/run/cubby/ab12/s1/rootfs",
		"/tmp/cubby-cluster-10/node", // another cluster's, not a prefix match of this one's
		"/usr/local/share",
		"/run/netns/cbsec1",
		"/mnt/other",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ToDrop:\n got %q\nwant %q", got, want)
	}
}

// TestDropRefusesHostNamespace: Drop run in its parent's mount namespace
// changes nothing and fails (the test binary shares go test's namespace).
func TestDropRefusesHostNamespace(t *testing.T) {
	if err := (Keep{Trees: []string{"/"}}).Drop(); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("Drop in the parent's namespace: %v, want a refusal", err)
	}
}

// envChild makes the test binary the child of TestDropInNewNamespace.
const envChild = "MOUNTNS_TEST_CHILD"

// TestDropInNewNamespace mounts two tmpfs on the host, starts a process in a
// new mount namespace (unshare --mount) that keeps one and drops the rest,
// and checks its mounts: the kept one stays, the other is gone there (and
// still mounted on the host), the kernel filesystems stay.
func TestDropInNewNamespace(t *testing.T) {
	if os.Getenv(envChild) != "" {
		if err := (Keep{Trees: []string{os.Getenv(envChild)}}).Drop(); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile("/proc/self/mountinfo")
		os.Stdout.Write(data)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (mount, unshare)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not found")
	}
	dir := t.TempDir()
	keep, drop := filepath.Join(dir, "keep"), filepath.Join(dir, "drop")
	for _, d := range []string{keep, drop} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(d, unix.MNT_DETACH) })
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "slave", os.Args[0], "-test.run=^TestDropInNewNamespace$")
	cmd.Env = append(os.Environ(), envChild+"="+keep)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	points := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 5 {
			points[mountinfo.Unescape(f[4])] = true
		}
	}
	if !points[keep] || points[drop] || !points["/proc"] || !points["/sys"] {
		t.Fatalf("child's mounts: keep %v, drop %v, /proc %v, /sys %v; want true, false, true, true\n%s",
			points[keep], points[drop], points["/proc"], points["/sys"], out)
	}
	host, err := Points("/proc/self/mountinfo")
	if err != nil || !slices.Contains(host, drop) {
		t.Fatalf("the host lost its mount %s: %v", drop, err)
	}
}
