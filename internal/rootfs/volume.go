package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
