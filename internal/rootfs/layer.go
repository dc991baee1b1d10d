package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

// Filesystem freeze ioctls (linux/fs.h: _IOWR('X', 119, int), _IOWR('X', 120, int)).
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// Layer is a captured disk (Capture) used read-only below sandbox disks: the
// image is mounted (ext4, ro, nosuid, nodev, noatime) at Mount and its upper
// directory, holding what the captured sandbox had written, whiteouts and
// opaque directories included, is an overlay lower layer. The files keep the
// ids they have inside a sandbox, so the layer is idmapped like the template.
type Layer struct {
	Image string `json:"image"` // the captured ext4 image file
	Mount string `json:"mount"` // its mount point (created on demand)
}

// layerFlags of a captured disk: nothing in it acts as a device, a setuid
// program or a writable file on the host.
const readOnlyLayerFlags = layerFlags | unix.MS_RDONLY

// lowerDirs returns the overlay lower directories for layers above the tree
// lowerDir, topmost first.
func lowerDirs(layers []Layer, lowerDir string) []string {
	out := make([]string, 0, len(layers)+1)
	for _, l := range layers {
		out = append(out, filepath.Join(l.Mount, upperName))
	}
	return append(out, lowerDir)
}

// mountLayers mounts every layer that is not mounted yet.
func (m *Manager) mountLayers(layers []Layer) error {
	if len(layers) == 0 {
		return nil
	}
	m.layerMu.Lock()
	defer m.layerMu.Unlock()
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return fmt.Errorf("mount layers: %w", err)
	}
	for _, l := range layers {
		if layerMounted(mounts, l) {
			continue
		}
		if err := mountLayer(l); err != nil {
			return err
		}
	}
	return nil
}

func layerMounted(mounts []mountinfo.Mount, l Layer) bool {
	for _, mt := range mounts {
		if mt.Point == l.Mount && mt.FSType == "ext4" {
			return true
		}
	}
	return false
}

// mountLayer attaches l.Image and mounts it read-only on l.Mount.
func mountLayer(l Layer) error {
	if err := os.MkdirAll(l.Mount, 0o700); err != nil {
		return fmt.Errorf("mount layer %s: %w", l.Image, err)
	}
	dev, err := attachLoop(l.Image)
	if err != nil {
		return fmt.Errorf("mount layer %s: %w", l.Image, err)
	}
	defer dev.Close() // autoclear: the device lives as long as the mount
	if err := unix.Mount(dev.Name(), l.Mount, "ext4", readOnlyLayerFlags, ""); err != nil {
		return fmt.Errorf("mount layer %s on %s: %w", l.Image, l.Mount, err)
	}
	return nil
}

// ReleaseLayer unmounts l and detaches its loop device (overlays still using
// it keep their private reference until they go). Not mounted returns nil.
func (m *Manager) ReleaseLayer(ctx context.Context, l Layer) error {
	m.layerMu.Lock()
	defer m.layerMu.Unlock()
	if err := unmountAll(l.Mount); err != nil {
		return fmt.Errorf("release layer %s: %w", l.Image, err)
	}
	devs, err := loopsBackedBy(l.Image)
	if err != nil {
		return fmt.Errorf("release layer %s: %w", l.Image, err)
	}
	for _, dev := range devs {
		if err := detachLoop(dev); err != nil {
			return fmt.Errorf("release layer %s: %w", l.Image, err)
		}
	}
	if len(devs) > 0 {
		return m.waitDetached(ctx, l.Image)
	}
	return nil
}

// Capture copies the disk of the mounted sandbox d to the new file dst (only
// its data extents: the copy is as sparse as the disk) while the disk's
// filesystem is frozen (FIFREEZE: its dirty data is written out and writers
// block until the thaw; readers and running processes go on), then checks the
// copy with `e2fsck -p` and removes from it the paths in drop (absolute paths
// as the sandbox sees them; whatever the sandbox made of them, symlinks are
// not followed out of the copy). It returns how long the filesystem was
// frozen. On error dst is removed and the disk is thawed: the sandbox goes on
// as before. It is CopyFrozen followed by Finish.
func (m *Manager) Capture(ctx context.Context, d Disk, dst string, drop []string) (time.Duration, error) {
	frozen, err := m.CopyFrozen(ctx, d, dst)
	if err != nil {
		return frozen, err
	}
	return frozen, m.Finish(ctx, dst, drop)
}

// CopyFrozen is the first half of Capture: the copy of d's disk to the new
// file dst with its filesystem frozen, and how long it was. On error dst is
// removed and the disk is thawed.
func (m *Manager) CopyFrozen(ctx context.Context, d Disk, dst string) (time.Duration, error) {
	d, err := d.canonical()
	if err != nil {
		return 0, fmt.Errorf("capture disk: %w", err)
	}
	layer, err := os.Open(filepath.Join(d.Dir, LayerName))
	if err != nil {
		return 0, fmt.Errorf("capture disk %s: %w", d.Dir, err)
	}
	defer layer.Close()
	if _, _, err := Usage(d.Dir); err != nil {
		return 0, fmt.Errorf("capture disk: %w", err)
	}
	start := time.Now()
	if _, err := unix.IoctlRetInt(int(layer.Fd()), ioctlFIFREEZE); err != nil {
		return 0, fmt.Errorf("capture disk %s: freeze: %w", d.Dir, err)
	}
	err = sparseCopy(filepath.Join(d.Dir, ImageName), dst)
	if _, terr := unix.IoctlRetInt(int(layer.Fd()), ioctlFITHAW); terr != nil && err == nil {
		err = fmt.Errorf("thaw: %w", terr)
	}
	frozen := time.Since(start)
	if err != nil {
		os.Remove(dst)
		return frozen, fmt.Errorf("capture disk %s: %w", d.Dir, err)
	}
	return frozen, nil
}

// Finish is the second half of Capture, on the copy dst CopyFrozen made
// (the sandbox no longer held): `e2fsck -p`, then the paths in drop removed.
// On error dst is removed.
func (m *Manager) Finish(ctx context.Context, dst string, drop []string) error {
	err := m.check(ctx, dst)
	if err == nil && len(drop) > 0 {
		err = scrub(dst, drop)
	}
	if err != nil {
		os.Remove(dst)
		return fmt.Errorf("capture disk %s: %w", dst, err)
	}
	return nil
}

// scrub mounts the captured image img (nosuid, nodev, noexec) next to it and
// removes the paths in drop from its upper directory through an os.Root, so a
// symlink the sandbox planted cannot lead outside the image.
func scrub(img string, drop []string) (err error) {
	mnt := img + ".mnt"
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return fmt.Errorf("scrub %s: %w", img, err)
	}
	defer os.Remove(mnt)
	dev, err := attachLoop(img)
	if err != nil {
		return fmt.Errorf("scrub %s: %w", img, err)
	}
	defer dev.Close()
	if err := unix.Mount(dev.Name(), mnt, "ext4", layerFlags|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("scrub %s: mount: %w", img, err)
	}
	defer func() {
		if uerr := unmountAll(mnt); uerr != nil && err == nil {
			err = fmt.Errorf("scrub %s: %w", img, uerr)
		}
	}()
	upper, err := os.Open(filepath.Join(mnt, upperName))
	if err != nil {
		return fmt.Errorf("scrub %s: %w", img, err)
	}
	defer upper.Close()
	for _, p := range drop {
		if err := removeInRoot(upper, p); err != nil {
			return fmt.Errorf("scrub %s: remove %s: %w", img, p, err)
		}
	}
	return nil
}

// removeInRoot removes path (and everything below it) from the tree at root,
// resolving its parents as the sandbox would, with root as "/" (openat2
// RESOLVE_IN_ROOT: absolute symlinks and ".." stay inside), and never
// following a symlink in its last component. A missing path is no error.
func removeInRoot(root *os.File, path string) error {
	rel := strings.TrimPrefix(filepath.Clean("/"+path), "/")
	if rel == "" {
		return errors.New("refusing to remove the root")
	}
	fd, err := unix.Openat2(int(root.Fd()), filepath.Dir(rel), &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	parent, err := os.OpenRoot(fdPath(fd, ""))
	if err != nil {
		return err
	}
	defer parent.Close()
	return parent.RemoveAll(filepath.Base(rel))
}

// check runs `e2fsck -p` on an unmounted image (exit 1: errors corrected).
func (m *Manager) check(ctx context.Context, img string) error {
	out, err := exec.CommandContext(ctx, m.fsck, "-p", img).CombinedOutput()
	var exit *exec.ExitError
	if err != nil && (!errors.As(err, &exit) || exit.ExitCode() >= 4) {
		return fmt.Errorf("e2fsck %s: %s: %w", img, out, err)
	}
	return nil
}

// Thaw thaws the filesystem of dir's mounted disk should a capture have left it
// frozen (a server killed mid-capture); a disk that is not frozen or not
// mounted is left as it is.
func Thaw(dir string) {
	if _, _, err := Usage(dir); err != nil {
		return
	}
	f, err := os.Open(filepath.Join(dir, LayerName))
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = unix.IoctlRetInt(int(f.Fd()), ioctlFITHAW) // EINVAL when not frozen
}

// AllocatedBytes returns the bytes a file occupies on disk (its allocated
// blocks: a sparse image counts only its data).
func AllocatedBytes(path string) (int64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("allocated bytes of %s: %w", path, err)
	}
	return st.Blocks * 512, nil
}
