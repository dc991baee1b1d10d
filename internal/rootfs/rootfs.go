// Package rootfs provides sandbox root filesystems: an overlayfs whose read-only
// lower layer is the template tree and whose writable upper layer lives in a
// per-sandbox, size-limited ext4 image file attached through a loop device.
//
// Layout of a sandbox (see Disk):
//
//	Dir/disk.img     sparse ext4 image (the sandbox's disk, DiskBytes large)
//	Dir/layer/       the image mounted (ext4 on /dev/loopN; nosuid, nodev, noatime)
//	Dir/layer/upper  overlay upperdir: every write of the sandbox
//	Dir/layer/work   overlay workdir
//	Rootfs           the overlay mount (nodev): the sandbox's root filesystem
//
// Everything the sandbox writes is on the host in the layer, mounted nosuid and
// nodev: a setuid binary or a device node it creates there is inert for host
// processes. The overlay keeps setuid (sudo works inside) but not devices.
//
// With a user namespace (Disk.Userns) both layers enter the overlay through
// idmapped mounts (mount_setattr(2) MOUNT_ATTR_IDMAP) of that namespace: the
// shared template tree, owned by host ids 0..65535, shows as owned by the
// sandbox's mapped ids without being copied or chowned, and what the sandbox
// writes is stored on its disk with the ids it has inside (root's files as 0),
// so a disk stays valid under any range.
package rootfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/userns"
)

// Names of the entries Prepare creates inside a sandbox directory.
const (
	ImageName  = "disk.img"
	LayerName  = "layer"
	RootfsName = "rootfs"
	upperName  = "upper"
	workName   = "work"
)

// UpperDir is the overlay upper directory (every write of the sandbox) of
// the sandbox directory dir while its root filesystem is mounted.
func UpperDir(dir string) string { return filepath.Join(dir, LayerName, upperName) }

// MinDiskBytes is the smallest accepted disk size (16 MiB); sizes are rounded up to
// a whole MiB.
const MinDiskBytes = 16 << 20

// detachWait bounds how long Unmount waits for the kernel to free the loop device.
const detachWait = 2 * time.Second

// Disk says where one sandbox's root filesystem lives and how its ids map.
type Disk struct {
	// Dir is the sandbox's private directory: the disk image and the layer mount.
	Dir string
	// Rootfs is the overlay mount point, "" = Dir/rootfs. With a user namespace
	// the namespace's root (host uid IDs.HostID) must be able to reach it, as
	// the OCI runtime's init runs as that uid (its parent directories need
	// search permission for it).
	Rootfs string
	// Userns is the nsfs file of the sandbox's user namespace (a bind mount
	// made by userns.Creator.Create); "" = ids are not mapped.
	Userns string
	// IDs is that namespace's mapping: the overlay is mounted with filesystem
	// uid and gid IDs.HostID (root inside), which overlayfs uses for its own
	// files in the idmapped upper layer. Ignored without Userns.
	IDs userns.Range
	// Layers are read-only captured disks (snapshots, see Layer) stacked
	// between the disk and the template tree, topmost first; nil = none. They
	// are mounted on demand by Prepare and Remount.
	Layers []Layer
}

// rootfs returns the overlay mount point.
func (d Disk) rootfs() string {
	if d.Rootfs == "" {
		return filepath.Join(d.Dir, RootfsName)
	}
	return d.Rootfs
}

// canonical returns d with Dir and Rootfs absolute and symlink-free.
func (d Disk) canonical() (Disk, error) {
	dir, err := canonical(d.Dir)
	if err != nil {
		return d, err
	}
	root, err := canonical(d.rootfs())
	if err != nil {
		return d, err
	}
	if d.Userns != "" && d.IDs.IsZero() {
		return d, fmt.Errorf("user namespace %s without an id range", d.Userns)
	}
	d.Dir, d.Rootfs = dir, root
	return d, nil
}

// Manager prepares and releases sandbox root filesystems. It keeps one formatted
// empty image per disk size in its cache directory. Safe for concurrent use on
// distinct sandbox directories.
type Manager struct {
	cacheDir string
	log      *slog.Logger
	mkfs     string
	fsck     string
	mu       sync.Mutex // serialises formatting of cache images
	layerMu  sync.Mutex // serialises mounting and releasing of layers
}

// New returns a Manager caching formatted images in cacheDir (created on demand).
// It needs root, the loop driver, ext4, overlayfs and e2fsprogs (mkfs.ext4, e2fsck).
func New(cacheDir string, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cacheDir: cacheDir, log: log, mkfs: "mkfs.ext4", fsck: "e2fsck"}
}

// Prepare creates d.Dir (if needed, mode 0700) with a new diskBytes-sized image
// and mounts the sandbox root filesystem over the read-only tree lowerDir at
// d.Rootfs (created if needed; its parent must exist). It returns the absolute
// rootfs path. It fails if d.Dir already holds an image. On error nothing is
// left mounted or attached and the files it created are removed.
func (m *Manager) Prepare(ctx context.Context, d Disk, lowerDir string, diskBytes int64) (string, error) {
	size := (diskBytes + 1<<20 - 1) &^ (1<<20 - 1)
	if size < MinDiskBytes {
		return "", fmt.Errorf("prepare rootfs %s: disk size %d below minimum %d", d.Dir, diskBytes, MinDiskBytes)
	}
	if err := checkLower(lowerDir); err != nil {
		return "", fmt.Errorf("prepare rootfs %s: %w", d.Dir, err)
	}
	_, statErr := os.Stat(d.Dir)
	if err := os.MkdirAll(d.Dir, 0o700); err != nil {
		return "", fmt.Errorf("prepare rootfs: %w", err)
	}
	cd, err := d.canonical()
	if err == nil {
		err = m.prepare(ctx, cd, lowerDir, size)
	}
	if err != nil {
		if statErr != nil {
			os.Remove(d.Dir)
		}
		return "", fmt.Errorf("prepare rootfs %s: %w", d.Dir, err)
	}
	return cd.Rootfs, nil
}

// prepare copies a formatted image into d.Dir and mounts it; on error it removes
// what it created.
func (m *Manager) prepare(ctx context.Context, d Disk, lowerDir string, size int64) error {
	cached, err := m.cachedImage(ctx, size)
	if err != nil {
		return err
	}
	if err := sparseCopy(cached, filepath.Join(d.Dir, ImageName)); err != nil {
		return err
	}
	if err := m.mount(d, lowerDir); err != nil {
		for _, p := range []string{filepath.Join(d.Dir, ImageName), filepath.Join(d.Dir, LayerName), d.Rootfs} {
			os.Remove(p)
		}
		return err
	}
	return nil
}

// Remount re-adopts a sandbox whose image survived (after a server restart or a
// host reboot): if the overlay is still mounted it returns its path; otherwise it
// clears partial mounts, checks the image with `e2fsck -p` and mounts it again over
// lowerDir (idmapped through d.Userns, which may be a new namespace with another
// range: the disk holds the ids of the inside). Files the sandbox wrote before are
// visible again. Errors wrap fs.ErrNotExist when d.Dir holds no image.
func (m *Manager) Remount(ctx context.Context, d Disk, lowerDir string) (string, error) {
	if err := checkLower(lowerDir); err != nil {
		return "", fmt.Errorf("remount rootfs %s: %w", d.Dir, err)
	}
	d, err := d.canonical()
	if err != nil {
		return "", fmt.Errorf("remount rootfs: %w", err)
	}
	img := filepath.Join(d.Dir, ImageName)
	if _, err := os.Stat(img); err != nil {
		return "", fmt.Errorf("remount rootfs %s: %w", d.Dir, err)
	}
	if m.Mounted(d) {
		return d.Rootfs, nil
	}
	if err := m.Unmount(ctx, d); err != nil {
		return "", fmt.Errorf("remount rootfs %s: %w", d.Dir, err)
	}
	if err := m.check(ctx, img); err != nil {
		return "", fmt.Errorf("remount rootfs %s: %w", d.Dir, err)
	}
	if err := m.mount(d, lowerDir); err != nil {
		return "", fmt.Errorf("remount rootfs %s: %w", d.Dir, err)
	}
	return d.Rootfs, nil
}

// mount attaches Dir/disk.img, mounts it on Dir/layer (nosuid, nodev) and the
// overlay on Rootfs. On error it undoes what it did.
func (m *Manager) mount(d Disk, lowerDir string) error {
	if strings.ContainsAny(d.Dir, ",:\\") {
		return fmt.Errorf("sandbox dir %q contains ',', ':' or '\\'", d.Dir)
	}
	if err := m.mountLayers(d.Layers); err != nil {
		return err
	}
	layer := filepath.Join(d.Dir, LayerName)
	for _, p := range []string{layer, d.Rootfs} {
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
	}
	dev, err := attachLoop(filepath.Join(d.Dir, ImageName))
	if err != nil {
		return err
	}
	defer dev.Close() // autoclear: the loop device now lives as long as the mount
	if err := unix.Mount(dev.Name(), layer, "ext4", layerFlags, ""); err != nil {
		return fmt.Errorf("mount %s on %s: %w", dev.Name(), layer, err)
	}
	if err := overlay(d, lowerDirs(d.Layers, lowerDir), layer); err != nil {
		if uerr := unmountAll(layer); uerr != nil {
			m.log.Warn("undo layer mount", "dir", d.Dir, "err", uerr)
		}
		return err
	}
	m.log.Debug("mounted rootfs", "dir", d.Dir, "rootfs", d.Rootfs, "loop", dev.Name(), "lower", lowerDir, "userns", d.Userns)
	return nil
}

// Mount flags of the host-side mounts: the layer holds whatever the sandbox
// wrote, so nothing in it may act as a device or a setuid program on the host;
// the overlay (the sandbox's "/") keeps setuid for the sandbox's own sudo.
const (
	layerFlags   = unix.MS_NOATIME | unix.MS_NOSUID | unix.MS_NODEV
	overlayFlags = unix.MS_NODEV
)

// overlay creates upper and work in layer (upper takes the owner and mode of the
// topmost lower root, so the merged "/" looks like the template's) and mounts
// the overlay of lowers (topmost first) on d.Rootfs, through idmapped layers
// when d has a user namespace.
func overlay(d Disk, lowers []string, layer string) error {
	upper, work := filepath.Join(layer, upperName), filepath.Join(layer, workName)
	var st unix.Stat_t
	if err := unix.Stat(lowers[0], &st); err != nil {
		return fmt.Errorf("stat lower %s: %w", lowers[0], err)
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
	if d.Userns != "" {
		return idmappedOverlay(d, lowers, layer)
	}
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", d.Rootfs, "overlay", overlayFlags, opts); err != nil {
		return fmt.Errorf("mount overlay on %s: %w", d.Rootfs, err)
	}
	return nil
}

// Unmount unmounts d's overlay and image and detaches its loop device, keeping
// Dir/disk.img so that Remount can mount it again. It waits (up to 2 s) for the
// kernel to free the loop device. Unknown or already unmounted disks return nil.
func (m *Manager) Unmount(ctx context.Context, d Disk) error {
	d, err := d.canonical()
	if err != nil {
		return fmt.Errorf("unmount rootfs: %w", err)
	}
	for _, p := range []string{d.Rootfs, filepath.Join(d.Dir, LayerName)} {
		if err := unmountAll(p); err != nil {
			return fmt.Errorf("unmount rootfs %s: %w", d.Dir, err)
		}
	}
	img := filepath.Join(d.Dir, ImageName)
	devs, err := loopsBackedBy(img)
	if err != nil {
		return fmt.Errorf("unmount rootfs %s: %w", d.Dir, err)
	}
	for _, dev := range devs {
		if err := detachLoop(dev); err != nil {
			return fmt.Errorf("unmount rootfs %s: %w", d.Dir, err)
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

// Release unmounts d's root filesystem, detaches its loop device and removes
// d.Dir with the image, and the d.Rootfs mount point. It works from what is on
// disk and in /proc/self/mountinfo, so it can clean up after a server restart. A
// missing Dir returns nil. It refuses to remove Dir while anything below it is
// still mounted.
func (m *Manager) Release(ctx context.Context, d Disk) error {
	if _, err := os.Lstat(d.Dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := m.Unmount(ctx, d); err != nil {
		return fmt.Errorf("release rootfs: %w", err)
	}
	d, err := d.canonical()
	if err != nil {
		return fmt.Errorf("release rootfs: %w", err)
	}
	for _, p := range []string{d.Dir, d.Rootfs} {
		if at, err := mountedBelow(p); err != nil || at != "" {
			return fmt.Errorf("release rootfs %s: still mounted at %q: %v", d.Dir, at, err)
		}
	}
	if err := os.Remove(d.Rootfs); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release rootfs %s: %w", d.Dir, err)
	}
	if err := os.RemoveAll(d.Dir); err != nil {
		return fmt.Errorf("release rootfs %s: %w", d.Dir, err)
	}
	return nil
}

// Mounted reports whether d's overlay root filesystem is mounted.
func (m *Manager) Mounted(d Disk) bool {
	d, err := d.canonical()
	if err != nil {
		return false
	}
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return false
	}
	for _, mt := range mounts {
		if mt.Point == d.Rootfs && mt.FSType == "overlay" {
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
