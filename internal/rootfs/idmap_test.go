package rootfs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/userns"
)

// TestMain lets the test binary serve as the helper of userns.Creator.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == userns.HelperCommand {
		os.Exit(userns.HelperMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// newUserns leases a range and creates a user namespace for it under dir,
// removed (and the lease released) at cleanup.
func newUserns(t *testing.T, dir string) (string, userns.Range) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := userns.NewCreator(exe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := userns.NewAllocator("")
	r, err := a.Claim(dir, userns.Range{})
	if err != nil {
		t.Fatal(err)
	}
	user, net := filepath.Join(dir, "user-"+suffix(t)), filepath.Join(dir, "net-"+suffix(t))
	if err := c.Create(context.Background(), r, user, net); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = userns.Remove(user)
		_ = userns.Remove(net)
		_ = a.Release(dir, r)
	})
	return user, r
}

func uidOf(t *testing.T, path string) uint32 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid
}

func TestIdmappedRootfs(t *testing.T) {
	ctx := context.Background()
	m, lower, dir := fixture(t)
	nsDir := t.TempDir()
	user, r := newUserns(t, nsDir)
	d := Disk{Dir: dir, Rootfs: filepath.Join(nsDir, "rootfs"), Userns: user, IDs: r}
	t.Cleanup(func() { _ = m.Release(ctx, d) })
	root, err := m.Prepare(ctx, d, lower, 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	// The shared template shows as owned by the sandbox's root, unchanged below.
	if got := uidOf(t, filepath.Join(root, "bin", "busybox")); got != r.HostID {
		t.Errorf("template file owned by %d through the overlay, want %d", got, r.HostID)
	}
	if got := uidOf(t, filepath.Join(lower, "bin", "busybox")); got != 0 {
		t.Errorf("template tree chowned: %d", got)
	}
	// A sandbox user (host id HostID+1000) writes: stored as 1000 on its disk.
	f := filepath.Join(root, "by-user")
	if err := asFSID(r.HostID+1000, func() error { return os.WriteFile(f, []byte("x"), 0o4755) }); err != nil {
		t.Fatal(err)
	}
	if got := uidOf(t, f); got != r.HostID+1000 {
		t.Errorf("new file owned by %d through the overlay, want %d", got, r.HostID+1000)
	}
	if got := uidOf(t, filepath.Join(dir, LayerName, upperName, "by-user")); got != 1000 {
		t.Errorf("new file stored as uid %d on the disk, want 1000", got)
	}
	// Ids outside the range cannot create files (host root included).
	if err := os.WriteFile(filepath.Join(root, "by-host-root"), nil, 0o644); !errors.Is(err, unix.EOVERFLOW) {
		t.Errorf("host root created a file through the idmapped overlay: %v", err)
	}
	assertOnlyOverlayAndLayer(t, d)

	// The same disk under another namespace and range: ownership follows.
	if err := m.Unmount(ctx, d); err != nil {
		t.Fatal(err)
	}
	d.Userns, d.IDs = newUserns(t, t.TempDir())
	if _, err := m.Remount(ctx, d, lower); err != nil {
		t.Fatal(err)
	}
	if got := uidOf(t, f); got != d.IDs.HostID+1000 {
		t.Errorf("after remount under %v: owned by %d, want %d", d.IDs, got, d.IDs.HostID+1000)
	}
	if err := m.Release(ctx, d); err != nil {
		t.Fatal(err)
	}
	assertGone(t, dir)
	if _, err := os.Lstat(d.Rootfs); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("rootfs mount point left: %v", err)
	}
}

// assertOnlyOverlayAndLayer checks the host-side mounts of d: the layer
// (nosuid, nodev), the overlay (nodev, setuid kept for the sandbox's sudo) and
// nothing else (the idmapped copies stay detached).
func assertOnlyOverlayAndLayer(t *testing.T, d Disk) {
	t.Helper()
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, mt := range mounts {
		switch {
		case mt.Point == filepath.Join(d.Dir, LayerName):
			found = append(found, "layer")
			if !mt.HasOpt("nosuid") || !mt.HasOpt("nodev") {
				t.Errorf("layer mounted %q, want nosuid,nodev", mt.Options)
			}
		case mt.Point == d.rootfs():
			found = append(found, "overlay")
			if !mt.HasOpt("nodev") || mt.HasOpt("nosuid") {
				t.Errorf("overlay mounted %q, want nodev without nosuid", mt.Options)
			}
		case strings.HasPrefix(mt.Point, d.Dir+"/"), strings.HasPrefix(mt.Point, d.rootfs()+"/"):
			t.Errorf("unexpected mount %s (%s)", mt.Point, mt.FSType)
		}
	}
	if strings.Join(found, ",") != "layer,overlay" {
		t.Errorf("mounts of %s: %v", d.Dir, found)
	}
}

func TestHostMountsNosuidNodev(t *testing.T) {
	m, lower, dir := fixture(t)
	if _, err := m.Prepare(context.Background(), Disk{Dir: dir}, lower, 16<<20); err != nil {
		t.Fatal(err)
	}
	assertOnlyOverlayAndLayer(t, Disk{Dir: dir})
}

func TestIdmappedNeedsRange(t *testing.T) {
	m, lower, dir := fixture(t)
	_, err := m.Prepare(context.Background(), Disk{Dir: dir, Userns: "/proc/self/ns/user"}, lower, 16<<20)
	if err == nil || !strings.Contains(err.Error(), "without an id range") {
		t.Fatalf("Prepare with a namespace but no range: %v", err)
	}
	assertGone(t, dir)
}
