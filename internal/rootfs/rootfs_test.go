package rootfs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/testenv/testrootfs"
)

func needRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root")
	}
	if _, err := os.Stat(loopControl); err != nil {
		tb.Skip("needs /dev/loop-control")
	}
}

func suffix(tb testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

// fixture returns a manager with a private cache, a busybox lower tree and a unique,
// not yet existing sandbox dir that is released at cleanup.
func fixture(tb testing.TB) (*Manager, string, string) {
	tb.Helper()
	needRoot(tb)
	base := tb.TempDir()
	lower := filepath.Join(base, "lower")
	if err := testrootfs.Busybox(lower); err != nil {
		tb.Fatal(err)
	}
	m := New(filepath.Join(base, "cache"), nil)
	dir := filepath.Join(base, "sbx-"+suffix(tb))
	tb.Cleanup(func() {
		if err := m.Release(context.Background(), Disk{Dir: dir}); err != nil {
			tb.Errorf("cleanup release: %v", err)
		}
	})
	return m, lower, dir
}

// assertGone checks that nothing of dir is left: no mount, no loop device, no files.
func assertGone(t *testing.T, dir string) {
	t.Helper()
	if p, err := mountedBelow(dir); err != nil || p != "" {
		t.Errorf("still mounted below %s: %q %v", dir, p, err)
	}
	if devs, err := loopsBackedBy(filepath.Join(dir, ImageName)); err != nil || len(devs) > 0 {
		t.Errorf("loop devices left for %s: %v %v", dir, devs, err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists: %v", dir, err)
	}
}

func TestPrepareWriteRemountRelease(t *testing.T) {
	ctx := context.Background()
	m, lower, dir := fixture(t)
	rootfs, err := m.Prepare(ctx, Disk{Dir: dir}, lower, 32<<20)
	if err != nil {
		t.Fatal(err)
	}
	if rootfs != filepath.Join(dir, RootfsName) || !m.Mounted(Disk{Dir: dir}) {
		t.Fatalf("rootfs %q mounted=%v", rootfs, m.Mounted(Disk{Dir: dir}))
	}
	if _, err := os.Stat(filepath.Join(rootfs, "bin", "sh")); err != nil {
		t.Fatalf("template not visible: %v", err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "hello"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(rootfs, "bin", "ls")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(lower, "bin", "ls")); err != nil {
		t.Errorf("template changed by a delete in the sandbox: %v", err)
	}
	if _, err := os.Stat(filepath.Join(lower, "hello")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("write leaked into the template: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, LayerName, upperName, "hello")); err != nil || string(b) != "kept" {
		t.Errorf("write not in the image's upper dir: %q %v", b, err)
	}
	used, total, err := Usage(dir)
	if err != nil || used == 0 || total < 28<<20 || total > 32<<20 {
		t.Errorf("Usage = %d, %d, %v", used, total, err)
	}

	if err := m.Unmount(ctx, Disk{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if m.Mounted(Disk{Dir: dir}) {
		t.Fatal("still mounted after Unmount")
	}
	if devs, _ := loopsBackedBy(filepath.Join(dir, ImageName)); len(devs) > 0 {
		t.Fatalf("loop devices left after Unmount: %v", devs)
	}
	if _, _, err := Usage(dir); err == nil {
		t.Error("Usage of an unmounted dir succeeded")
	}
	if _, err := m.Remount(ctx, Disk{Dir: dir}, lower); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(rootfs, "hello")); err != nil || string(b) != "kept" {
		t.Errorf("after remount: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(rootfs, "bin", "ls")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("whiteout lost after remount: %v", err)
	}
	if p, err := m.Remount(ctx, Disk{Dir: dir}, lower); err != nil || p != rootfs {
		t.Errorf("remount of a mounted dir = %q, %v", p, err)
	}

	if err := m.Release(ctx, Disk{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	assertGone(t, dir)
	if err := m.Release(ctx, Disk{Dir: dir}); err != nil {
		t.Errorf("second Release: %v", err)
	}
}

func TestDiskFullIsContained(t *testing.T) {
	m, lower, dir := fixture(t)
	rootfs, err := m.Prepare(context.Background(), Disk{Dir: dir}, lower, 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(rootfs, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		_, werr = f.Write(buf)
	}
	if !errors.Is(werr, unix.ENOSPC) {
		t.Fatalf("writing 64 MiB into a 16 MiB disk: %v, want ENOSPC", werr)
	}
	fi, err := os.Stat(filepath.Join(dir, ImageName))
	if err != nil || fi.Size() != 16<<20 {
		t.Errorf("image size %v, %v", fi, err)
	}
	if err := os.WriteFile(filepath.Join(t.TempDir(), "host"), buf, 0o600); err != nil {
		t.Errorf("host disk affected: %v", err)
	}
}

func TestPrepareFailureLeavesNothing(t *testing.T) {
	ctx := context.Background()
	m, _, dir := fixture(t)
	if _, err := m.Prepare(ctx, Disk{Dir: dir}, "/nonexistent-"+suffix(t), 16<<20); err == nil {
		t.Fatal("Prepare with a missing lower dir succeeded")
	}
	assertGone(t, dir)
	// procfs passes the checks but overlayfs refuses it as a lower layer, after the
	// image is attached and mounted.
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Prepare(ctx, Disk{Dir: dir}, "/proc", 16<<20); err == nil || !strings.Contains(err.Error(), "mount overlay") {
		t.Fatalf("Prepare over /proc: %v, want an overlay mount error", err)
	}
	assertEmpty(t, dir)
	// A cached image that is no ext4 fails the layer mount after the loop attach.
	bad := filepath.Join(m.cacheDir, "ext4-"+strconv.Itoa(20<<20)+".img")
	if err := os.WriteFile(bad, make([]byte, 20<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Prepare(ctx, Disk{Dir: dir}, t.TempDir(), 20<<20); err == nil || !strings.Contains(err.Error(), "/dev/loop") {
		t.Fatalf("Prepare from a corrupt image: %v, want a layer mount error", err)
	}
	assertEmpty(t, dir)
	if _, err := m.Prepare(ctx, Disk{Dir: dir}, t.TempDir(), 1<<20); err == nil {
		t.Error("Prepare below the minimum size succeeded")
	}
}

// assertEmpty checks that a failed Prepare left dir empty, unmounted and detached.
func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	if p, err := mountedBelow(dir); err != nil || p != "" {
		t.Errorf("left mounted: %q %v", p, err)
	}
	if devs, _ := loopsBackedBy(filepath.Join(dir, ImageName)); len(devs) > 0 {
		t.Errorf("left loop devices: %v", devs)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("left files: %v", entries)
	}
}

func TestConcurrentPrepare(t *testing.T) {
	ctx := context.Background()
	m, lower, dir := fixture(t)
	dirs := []string{dir + "a", dir + "b", dir + "c"}
	var wg sync.WaitGroup
	errs := make([]error, len(dirs))
	for i, d := range dirs {
		t.Cleanup(func() { _ = m.Release(ctx, Disk{Dir: d}) })
		wg.Go(func() { _, errs[i] = m.Prepare(ctx, Disk{Dir: d}, lower, 24<<20) })
	}
	wg.Wait()
	devs := map[string]bool{}
	for i, d := range dirs {
		if errs[i] != nil {
			t.Fatalf("prepare %s: %v", d, errs[i])
		}
		l, _ := loopsBackedBy(filepath.Join(d, ImageName))
		if len(l) != 1 || devs[l[0]] {
			t.Errorf("loop devices of %s: %v (seen %v)", d, l, devs)
		}
		for _, x := range l {
			devs[x] = true
		}
	}
	for _, d := range dirs {
		if err := m.Release(ctx, Disk{Dir: d}); err != nil {
			t.Error(err)
		}
		assertGone(t, d)
	}
}

func TestReleaseAfterRestart(t *testing.T) {
	ctx := context.Background()
	m, lower, dir := fixture(t)
	if _, err := m.Prepare(ctx, Disk{Dir: dir}, lower, 16<<20); err != nil {
		t.Fatal(err)
	}
	// A new manager (as after a server restart) knows only what is on disk.
	m2 := New(t.TempDir(), nil)
	if !m2.Mounted(Disk{Dir: dir}) {
		t.Fatal("new manager does not see the mount")
	}
	if err := m2.Release(ctx, Disk{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	assertGone(t, dir)
}

func TestSparseCopyKeepsHoles(t *testing.T) {
	needRoot(t)
	m := New(t.TempDir(), nil)
	img, err := m.cachedImage(context.Background(), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "copy.img")
	if err := sparseCopy(img, dst); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(img)
	b, _ := os.ReadFile(dst)
	if !bytes.Equal(a, b) {
		t.Fatal("copy differs from source")
	}
	var st unix.Stat_t
	if err := unix.Stat(dst, &st); err != nil {
		t.Fatal(err)
	}
	if allocated := st.Blocks * 512; allocated > 16<<20 {
		t.Errorf("copy allocates %d bytes of a 64 MiB image, want sparse", allocated)
	}
}

func TestMountinfoSeesOverlay(t *testing.T) {
	m, lower, dir := fixture(t)
	if _, err := m.Prepare(context.Background(), Disk{Dir: dir}, lower, 16<<20); err != nil {
		t.Fatal(err)
	}
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, mt := range mounts {
		if strings.HasPrefix(mt.Point, dir+"/") {
			types = append(types, mt.FSType)
			if mt.FSType == "ext4" && !strings.HasPrefix(mt.Source, "/dev/loop") {
				t.Errorf("layer source %q", mt.Source)
			}
		}
	}
	sort.Strings(types)
	if !slices.Equal(types, []string{"ext4", "overlay"}) {
		t.Errorf("mounts below %s: %v", dir, types)
	}
}

// BenchmarkPrepareRelease measures one Prepare plus one Release of a 1 GiB disk
// with a warm image cache, reporting the medians of both halves in ms.
func BenchmarkPrepareRelease(b *testing.B) {
	ctx := context.Background()
	m, lower, dir := fixture(b)
	if _, err := m.cachedImage(ctx, 1<<30); err != nil {
		b.Fatal(err)
	}
	var prep, rel []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := m.Prepare(ctx, Disk{Dir: dir}, lower, 1<<30); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := m.Release(ctx, Disk{Dir: dir}); err != nil {
			b.Fatal(err)
		}
		prep, rel = append(prep, t1.Sub(t0)), append(rel, time.Since(t1))
	}
	b.ReportMetric(medianMs(prep), "prepare-ms")
	b.ReportMetric(medianMs(rel), "release-ms")
}

// BenchmarkImage compares formatting a 1 GiB image per sandbox (mkfs) with a
// sparse copy of the cached formatted image (copy), in ms per image.
func BenchmarkImage(b *testing.B) {
	needRoot(b)
	ctx := context.Background()
	m := New(b.TempDir(), nil)
	cached, err := m.cachedImage(ctx, 1<<30)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	b.Run("mkfs", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			t0 := time.Now()
			m2 := New(filepath.Join(dir, suffix(b)), nil)
			if _, err := m2.cachedImage(ctx, 1<<30); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
			os.RemoveAll(m2.cacheDir)
		}
		b.ReportMetric(medianMs(ds), "median-ms")
	})
	b.Run("copy", func(b *testing.B) {
		var ds []time.Duration
		for b.Loop() {
			dst := filepath.Join(dir, suffix(b)+".img")
			t0 := time.Now()
			if err := sparseCopy(cached, dst); err != nil {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
			os.Remove(dst)
		}
		b.ReportMetric(medianMs(ds), "median-ms")
	})
}

func medianMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}
