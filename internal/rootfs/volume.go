package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

// A volume is a persistent, size-limited directory sandboxes bind-mount: an
// ext4 image of its own (the quota: a full volume is ENOSPC for its writers
// only) mounted nosuid,nodev on the host.
//
//	<dir>/disk.img   the image (sparse)
//	<dir>/mnt/       its mount
//	<dir>/mnt/data/  the volume's files (mode 0777: any sandbox user writes)
const (
	volumeMnt  = "mnt"
	volumeData = "data"
)

// VolumeData returns the directory holding the files of the volume in dir.
func VolumeData(dir string) string { return filepath.Join(dir, volumeMnt, volumeData) }

// CreateVolume creates the volume dir (which must not exist) with a new image
// of sizeBytes (at least MinDiskBytes, rounded up to a MiB) and mounts it. On
// error nothing is left.
func (m *Manager) CreateVolume(ctx context.Context, dir string, sizeBytes int64) (err error) {
	size := (sizeBytes + 1<<20 - 1) &^ (1<<20 - 1)
	if size < MinDiskBytes {
		return fmt.Errorf("create volume %s: size %d below minimum %d", dir, sizeBytes, MinDiskBytes)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("create volume: %w", err)
	}
	defer func() {
		if err != nil {
			_ = m.ReleaseVolume(context.WithoutCancel(ctx), dir)
		}
	}()
	cached, err := m.cachedImage(ctx, size)
	if err != nil {
		return fmt.Errorf("create volume %s: %w", dir, err)
	}
	if err := sparseCopy(cached, filepath.Join(dir, ImageName)); err != nil {
		return fmt.Errorf("create volume %s: %w", dir, err)
	}
	if err := m.MountVolume(dir); err != nil {
		return err
	}
	data := VolumeData(dir)
	if err := os.Mkdir(data, 0o777); err != nil {
		return fmt.Errorf("create volume %s: %w", dir, err)
	}
	if err := os.Chmod(data, 0o777); err != nil { // past the umask
		return fmt.Errorf("create volume %s: %w", dir, err)
	}
	return nil
}

// MountVolume mounts the volume in dir unless it is mounted (after a host
// reboot it is not).
func (m *Manager) MountVolume(dir string) error {
	m.layerMu.Lock()
	defer m.layerMu.Unlock()
	mnt := filepath.Join(dir, volumeMnt)
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return fmt.Errorf("mount volume %s: %w", dir, err)
	}
	for _, mt := range mounts {
		if mt.Point == mnt && mt.FSType == "ext4" {
			return nil
		}
	}
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return fmt.Errorf("mount volume %s: %w", dir, err)
	}
	dev, err := attachLoop(filepath.Join(dir, ImageName))
	if err != nil {
		return fmt.Errorf("mount volume %s: %w", dir, err)
	}
	defer dev.Close()
	if err := unix.Mount(dev.Name(), mnt, "ext4", layerFlags, ""); err != nil {
		return fmt.Errorf("mount volume %s: %w", dir, err)
	}
	return nil
}

// ReleaseVolume unmounts the volume in dir, detaches its loop device and
// removes dir with everything in it. A missing dir returns nil.
func (m *Manager) ReleaseVolume(ctx context.Context, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := m.ReleaseLayer(ctx, Layer{Image: filepath.Join(dir, ImageName), Mount: filepath.Join(dir, volumeMnt)}); err != nil {
		return fmt.Errorf("release volume: %w", err)
	}
	if at, err := mountedBelow(dir); err != nil || at != "" {
		return fmt.Errorf("release volume %s: still mounted at %q: %v", dir, at, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("release volume %s: %w", dir, err)
	}
	return nil
}

// MountView mounts at dst (created if needed) a view of the directory src
// idmapped through the user namespace at usernsPath (see idmapped), for
// runtimes that cannot idmap a bind mount themselves: a sandbox bind-mounting
// the view sees src's files with the ids it has inside. A view already
// mounted at dst is kept.
func (m *Manager) MountView(src, dst, usernsPath string) error {
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return fmt.Errorf("mount view %s: %w", dst, err)
	}
	for _, mt := range mounts {
		if mt.Point == dst {
			return nil
		}
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return fmt.Errorf("mount view %s: %w", dst, err)
	}
	ns, err := unix.Open(usernsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mount view %s: open user namespace: %w", dst, err)
	}
	defer unix.Close(ns)
	fd, err := idmapped(src, ns, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("mount view %s: %w", dst, err)
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount view %s: move_mount: %w", dst, err)
	}
	return nil
}

// UnmountViews unmounts every mount at or below dir (the views MountView
// made there) and removes dir's then empty mount points with rmdir only, so
// nothing below a mount that stays is ever removed. A missing dir returns nil.
func UnmountViews(dir string) error {
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return fmt.Errorf("unmount views: %w", err)
	}
	for _, mt := range mounts {
		if mt.Point == dir || strings.HasPrefix(mt.Point, dir+"/") {
			if err := unmountAll(mt.Point); err != nil {
				return fmt.Errorf("unmount views: %w", err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unmount views: %w", err)
	}
	for _, e := range entries {
		if err := unix.Rmdir(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("unmount views: %w", err)
		}
	}
	return nil
}
