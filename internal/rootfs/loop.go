package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

const (
	loopControl   = "/dev/loop-control"
	loopMajor     = 7
	loopBlockSize = 4096 // matches the ext4 block size of the images
	loopAttempts  = 32   // retries when another process grabs the free device first
)

// attachLoop binds file to a free loop device with autoclear and direct I/O and
// returns the open device. The caller closes it once the device is mounted; the
// kernel then detaches it when the last user (the mount) goes away.
func attachLoop(file string) (*os.File, error) {
	backing, err := os.OpenFile(file, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop: %w", err)
	}
	defer backing.Close()
	ctl, err := os.OpenFile(loopControl, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("attach loop: %w", err)
	}
	defer ctl.Close()
	for range loopAttempts {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("attach loop: LOOP_CTL_GET_FREE: %w", err)
		}
		dev, err := openLoop(n)
		if err != nil {
			return nil, err
		}
		err = configureLoop(dev, backing, file)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("attach loop %s to %s: %w", dev.Name(), file, err)
		}
	}
	return nil, fmt.Errorf("attach loop to %s: no free device after %d attempts", file, loopAttempts)
}

// openLoop opens /dev/loopN, creating the node when no devtmpfs/udev did.
func openLoop(n int) (*os.File, error) {
	path := "/dev/loop" + strconv.Itoa(n)
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		err = unix.Mknod(path, unix.S_IFBLK|0o660, int(unix.Mkdev(loopMajor, uint32(n))))
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		f, err = os.OpenFile(path, os.O_RDWR|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return f, nil
}

// configureLoop uses LOOP_CONFIGURE (Linux 5.8+) and falls back to LOOP_SET_FD +
// LOOP_SET_STATUS64 on kernels that lack it.
func configureLoop(dev, backing *os.File, name string) error {
	info := unix.LoopInfo64{Flags: unix.LO_FLAGS_AUTOCLEAR | unix.LO_FLAGS_DIRECT_IO}
	copy(info.File_name[:len(info.File_name)-1], name)
	cfg := unix.LoopConfig{Fd: uint32(backing.Fd()), Size: loopBlockSize, Info: info}
	err := unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTTY) {
		return err
	}
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(backing.Fd())); err != nil {
		return err
	}
	info.Flags = unix.LO_FLAGS_AUTOCLEAR
	if err := unix.IoctlLoopSetStatus64(int(dev.Fd()), &info); err != nil {
		_ = unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_CLR_FD, 0)
		return err
	}
	return nil
}

// loopsBackedBy lists the loop devices (e.g. "/dev/loop3") whose backing file is
// file, read from /sys/block/loopN/loop/backing_file.
func loopsBackedBy(file string) ([]string, error) {
	entries, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, fmt.Errorf("list loop devices: %w", err)
	}
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err != nil {
			continue // detached between glob and read
		}
		got := strings.TrimSuffix(string(b), "\n")
		if got == file || strings.TrimSuffix(got, " (deleted)") == file {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(e))))
		}
	}
	return out, nil
}

// detachLoop issues LOOP_CLR_FD on dev. A device still in use gets autoclear set
// by the kernel and is detached when its last user closes it; an already free
// device (ENXIO) is not an error.
func detachLoop(dev string) error {
	f, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	defer f.Close()
	err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
	if err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach %s: LOOP_CLR_FD: %w", dev, err)
	}
	return nil
}
