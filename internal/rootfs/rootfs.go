// Package rootfs provides sandbox root filesystems: an overlayfs whose read-only
// lower layer is the template tree and whose writable upper layer lives in a
// per-sandbox, size-limited ext4 image file attached through a loop device.
//
// Layout of a sandbox directory dir:
//
//	dir/disk.img     sparse ext4 image (the sandbox's disk, DiskBytes large)
//	dir/layer/       the image mounted (ext4 on /dev/loopN)
//	dir/layer/upper  overlay upperdir: every write of the sandbox
//	dir/layer/work   overlay workdir
//	dir/rootfs/      the overlay mount: the sandbox's root filesystem
package rootfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

// Names of the entries Prepare creates inside a sandbox directory.
const (
	ImageName  = "disk.img"
	LayerName  = "layer"
	RootfsName = "rootfs"
	upperName  = "upper"
	workName   = "work"
)

// MinDiskBytes is the smallest accepted disk size (16 MiB); sizes are rounded up to
// a whole MiB.
const MinDiskBytes = 16 << 20

// detachWait bounds how long Unmount waits for the kernel to free the loop device.
const detachWait = 2 * time.Second

// Manager prepares and releases sandbox root filesystems. It keeps one formatted
// empty image per disk size in its cache directory. Safe for concurrent use on
// distinct sandbox directories.
type Manager struct {
	cacheDir string
	log      *slog.Logger
	mkfs     string
	fsck     string
	mu       sync.Mutex // serialises formatting of cache images
}

// New returns a Manager caching formatted images in cacheDir (created on demand).
// It needs root, the loop driver, ext4, overlayfs and e2fsprogs (mkfs.ext4, e2fsck).
func New(cacheDir string, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cacheDir: cacheDir, log: log, mkfs: "mkfs.ext4", fsck: "e2fsck"}
}

// Prepare creates dir (if needed) with a new diskBytes-sized image and mounts the
// sandbox root filesystem over the read-only tree lowerDir. It returns the absolute
// rootfs path (dir/rootfs). It fails if dir already holds an image. On error
// nothing is left mounted or attached and the files it created are removed.
func (m *Manager) Prepare(ctx context.Context, dir, lowerDir string, diskBytes int64) (string, error) {
	size := (diskBytes + 1<<20 - 1) &^ (1<<20 - 1)
	if size < MinDiskBytes {
		return "", fmt.Errorf("prepare rootfs %s: disk size %d below minimum %d", dir, diskBytes, MinDiskBytes)
	}
	if err := checkLower(lowerDir); err != nil {
		return "", fmt.Errorf("prepare rootfs %s: %w", dir, err)
	}
	_, statErr := os.Stat(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("prepare rootfs: %w", err)
	}
	cdir, err := canonical(dir)
	if err == nil {
		err = m.prepare(ctx, cdir, lowerDir, size)
	}
	if err != nil {
		if statErr != nil {
			os.Remove(dir)
		}
		return "", fmt.Errorf("prepare rootfs %s: %w", dir, err)
	}
	return filepath.Join(cdir, RootfsName), nil
}

// prepare copies a formatted image into dir and mounts it; on error it removes
// what it created inside dir.
func (m *Manager) prepare(ctx context.Context, dir, lowerDir string, size int64) error {
	cached, err := m.cachedImage(ctx, size)
	if err != nil {
		return err
	}
	if err := sparseCopy(cached, filepath.Join(dir, ImageName)); err != nil {
		return err
	}
	if _, err := m.mount(dir, lowerDir); err != nil {
		for _, name := range []string{ImageName, LayerName, RootfsName} {
			os.Remove(filepath.Join(dir, name))
		}
		return err
	}
	return nil
}

// Remount re-adopts a sandbox directory whose image survived (after a server restart
// or a host reboot): if the overlay is still mounted it returns its path; otherwise it
// clears partial mounts, checks the image with `e2fsck -p` and mounts it again over
// lowerDir. Files the sandbox wrote before are visible again. Errors wrap
// fs.ErrNotExist when dir holds no image.
func (m *Manager) Remount(ctx context.Context, dir, lowerDir string) (string, error) {
	if err := checkLower(lowerDir); err != nil {
		return "", fmt.Errorf("remount rootfs %s: %w", dir, err)
	}
	dir, err := canonical(dir)
	if err != nil {
		return "", fmt.Errorf("remount rootfs: %w", err)
	}
	img := filepath.Join(dir, ImageName)
	if _, err := os.Stat(img); err != nil {
		return "", fmt.Errorf("remount rootfs %s: %w", dir, err)
	}
	if m.Mounted(dir) {
		return filepath.Join(dir, RootfsName), nil
	}
	if err := m.Unmount(ctx, dir); err != nil {
		return "", fmt.Errorf("remount rootfs %s: %w", dir, err)
	}
	if out, err := exec.CommandContext(ctx, m.fsck, "-p", img).CombinedOutput(); err != nil {
		var exit *exec.ExitError // exit status 1 = errors corrected
		if !errors.As(err, &exit) || exit.ExitCode() >= 4 {
			return "", fmt.Errorf("remount rootfs %s: e2fsck: %s: %w", dir, out, err)
		}
	}
	rootfs, err := m.mount(dir, lowerDir)
	if err != nil {
		return "", fmt.Errorf("remount rootfs %s: %w", dir, err)
	}
	return rootfs, nil
}

// mount attaches dir/disk.img, mounts it on dir/layer and the overlay on dir/rootfs.
// On error it undoes what it did.
func (m *Manager) mount(dir, lowerDir string) (string, error) {
	if strings.ContainsAny(dir, ",:\\") {
		return "", fmt.Errorf("sandbox dir %q contains ',', ':' or '\\'", dir)
	}
	layer, rootfs := filepath.Join(dir, LayerName), filepath.Join(dir, RootfsName)
	for _, d := range []string{layer, rootfs} {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	dev, err := attachLoop(filepath.Join(dir, ImageName))
	if err != nil {
		return "", err
	}
	defer dev.Close() // autoclear: the loop device now lives as long as the mount
	if err := unix.Mount(dev.Name(), layer, "ext4", unix.MS_NOATIME, ""); err != nil {
		return "", fmt.Errorf("mount %s on %s: %w", dev.Name(), layer, err)
	}
	if err := overlay(lowerDir, layer, rootfs); err != nil {
		if uerr := unmountAll(layer); uerr != nil {
			m.log.Warn("undo layer mount", "dir", dir, "err", uerr)
		}
		return "", err
	}
	m.log.Debug("mounted rootfs", "dir", dir, "loop", dev.Name(), "lower", lowerDir)
	return rootfs, nil
}

// overlay creates upper and work in layer (upper takes the owner and mode of the
// lower root, so the merged "/" looks like the template's) and mounts the overlay.
func overlay(lowerDir, layer, rootfs string) error {
	upper, work := filepath.Join(layer, upperName), filepath.Join(layer, workName)
	var st unix.Stat_t
	if err := unix.Stat(lowerDir, &st); err != nil {
		return fmt.Errorf("stat lower %s: %w", lowerDir, err)
	}
	if err := os.Mkdir(upper, 0o755); err == nil {
		if err := os.Chown(upper, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
			return fmt.Errorf("chmod %s: %w", upper, err)
		}
	} else if !errors.Is(err, os.ErrExist) {
		return err
	}
	if err := os.Mkdir(work, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	opts := "lowerdir=" + lowerDir + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", rootfs, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay on %s: %w", rootfs, err)
	}
	return nil
}

// Unmount unmounts dir's overlay and image and detaches its loop device, keeping
// dir/disk.img so that Remount can mount it again. It waits (up to 2 s) for the
// kernel to free the loop device. Unknown or already unmounted dirs return nil.
func (m *Manager) Unmount(ctx context.Context, dir string) error {
	dir, err := canonical(dir)
	if err != nil {
		return fmt.Errorf("unmount rootfs: %w", err)
	}
	for _, p := range []string{filepath.Join(dir, RootfsName), filepath.Join(dir, LayerName)} {
		if err := unmountAll(p); err != nil {
			return fmt.Errorf("unmount rootfs %s: %w", dir, err)
		}
	}
	img := filepath.Join(dir, ImageName)
	devs, err := loopsBackedBy(img)
	if err != nil {
		return fmt.Errorf("unmount rootfs %s: %w", dir, err)
	}
	for _, d := range devs {
		if err := detachLoop(d); err != nil {
			return fmt.Errorf("unmount rootfs %s: %w", dir, err)
		}
	}
	if len(devs) > 0 {
		return m.waitDetached(ctx, img)
	}
	return nil
}

// waitDetached polls until no loop device is backed by img. A device that stays
// busy (held by a mount in another namespace) is logged and left to autoclear.
func (m *Manager) waitDetached(ctx context.Context, img string) error {
	ctx, cancel := context.WithTimeout(ctx, detachWait)
	defer cancel()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		devs, err := loopsBackedBy(img)
		if err != nil || len(devs) == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			m.log.Warn("loop device still busy, left to autoclear", "image", img, "devices", devs)
			return nil
		case <-tick.C:
		}
	}
}

// Release unmounts dir's root filesystem, detaches its loop device and removes dir
// with the image. It works from what is on disk and in /proc/self/mountinfo, so it
// can clean up after a server restart. A missing dir returns nil. It refuses to
// remove dir while anything below it is still mounted.
func (m *Manager) Release(ctx context.Context, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := m.Unmount(ctx, dir); err != nil {
		return fmt.Errorf("release rootfs: %w", err)
	}
	dir, err := canonical(dir)
	if err != nil {
		return fmt.Errorf("release rootfs: %w", err)
	}
	if p, err := mountedBelow(dir); err != nil || p != "" {
		return fmt.Errorf("release rootfs %s: still mounted at %q: %v", dir, p, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("release rootfs %s: %w", dir, err)
	}
	return nil
}

// Mounted reports whether dir's overlay root filesystem is mounted.
func (m *Manager) Mounted(dir string) bool {
	dir, err := canonical(dir)
	if err != nil {
		return false
	}
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return false
	}
	target := filepath.Join(dir, RootfsName)
	for _, mt := range mounts {
		if mt.Point == target && mt.FSType == "overlay" {
			return true
		}
	}
	return false
}

// Usage reports the used and total bytes of dir's writable layer (statfs of the
// mounted image). It returns an error when the layer is not mounted.
func Usage(dir string) (used, total uint64, err error) {
	layer := filepath.Join(dir, LayerName)
	var parent, self unix.Stat_t
	if err := unix.Stat(dir, &parent); err != nil {
		return 0, 0, fmt.Errorf("disk usage %s: %w", dir, err)
	}
	if err := unix.Stat(layer, &self); err != nil {
		return 0, 0, fmt.Errorf("disk usage %s: %w", dir, err)
	}
	if parent.Dev == self.Dev {
		return 0, 0, fmt.Errorf("disk usage %s: layer not mounted", dir)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(layer, &fs); err != nil {
		return 0, 0, fmt.Errorf("disk usage %s: %w", dir, err)
	}
	bs := uint64(fs.Bsize)
	return (fs.Blocks - fs.Bfree) * bs, fs.Blocks * bs, nil
}

// unmountAll unmounts every mount stacked on path, lazily (MNT_DETACH) when busy.
func unmountAll(path string) error {
	for range 16 {
		err := unix.Unmount(path, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(path, unix.MNT_DETACH)
		}
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil // not (or no longer) a mount point
		default:
			return fmt.Errorf("unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted after 16 unmounts", path)
}

// mountedBelow returns a mount point at or below dir, or "".
func mountedBelow(dir string) (string, error) {
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return "", err
	}
	for _, mt := range mounts {
		if mt.Point == dir || strings.HasPrefix(mt.Point, dir+"/") {
			return mt.Point, nil
		}
	}
	return "", nil
}

// canonical returns dir as an absolute path with symlinks resolved (as far as it
// exists), which is how the kernel reports it in mountinfo and loop backing files.
func canonical(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real, nil
	}
	return abs, nil
}

// checkLower rejects lower directories that are not absolute directories or whose
// path the overlay option parser would split (',', ':' or '\').
func checkLower(lowerDir string) error {
	if !filepath.IsAbs(lowerDir) {
		return fmt.Errorf("lower dir %q is not absolute", lowerDir)
	}
	if strings.ContainsAny(lowerDir, ",:\\") {
		return fmt.Errorf("lower dir %q contains ',', ':' or '\\'", lowerDir)
	}
	fi, err := os.Stat(lowerDir)
	if err != nil {
		return fmt.Errorf("lower dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("lower dir %q is not a directory", lowerDir)
	}
	return nil
}
