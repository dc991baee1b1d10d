package rootfs

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// idmappedOverlay mounts the overlay of lowers (topmost first) and
// layer/{upper,work} on d.Rootfs with every layer idmapped through d.Userns. The idmapped copies are
// detached mounts, named to overlayfs as /proc/self/fd/<fd>; overlayfs keeps
// private clones of its layers, so the descriptors are closed afterwards and
// nothing but the overlay appears in the mount table.
func idmappedOverlay(d Disk, lowers []string, layer string) error {
	ns, err := unix.Open(d.Userns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open user namespace: %w", err)
	}
	defer unix.Close(ns)
	lowerPaths := make([]string, len(lowers))
	for i, dir := range lowers {
		fd, err := idmapped(dir, ns, unix.MOUNT_ATTR_RDONLY)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		lowerPaths[i] = fdPath(fd, "")
	}
	upper, err := idmapped(layer, ns, 0)
	if err != nil {
		return err
	}
	defer unix.Close(upper)
	opts := "lowerdir=" + strings.Join(lowerPaths, ":") + ",upperdir=" + fdPath(upper, upperName) + ",workdir=" + fdPath(upper, workName)
	err = asFSID(d.IDs.HostID, func() error {
		return unix.Mount("overlay", d.Rootfs, "overlay", overlayFlags, opts)
	})
	if err != nil {
		return fmt.Errorf("mount idmapped overlay on %s: %w", d.Rootfs, err)
	}
	return nil
}

// idmapped returns the descriptor of a detached copy of the mount at path
// whose ids are mapped through the user namespace open at usernsFD
// (open_tree(2) OPEN_TREE_CLONE, then mount_setattr(2) MOUNT_ATTR_IDMAP, plus
// the MOUNT_ATTR_* flags in attrs): a file owned by host id k below path shows
// as owned by the host id that k inside the namespace maps to, and a file
// created through the copy by host id h is stored as the id h has inside.
// Creators outside the namespace's range get EOVERFLOW.
func idmapped(path string, usernsFD int, attrs uint64) (int, error) {
	fd, err := unix.OpenTree(unix.AT_FDCWD, path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("open_tree %s: %w", path, err)
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | attrs, Userns_fd: uint64(usernsFD)}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("idmapped mount of %s: %w", path, err)
	}
	return fd, nil
}

func fdPath(fd int, name string) string {
	return filepath.Join("/proc/self/fd", strconv.Itoa(fd), name)
}

// asFSID runs fn on a new OS thread whose filesystem uid and gid are id, with
// its permitted capabilities effective again (the kernel clears the file
// capabilities from the effective set when fsuid leaves 0, capabilities(7)).
// overlayfs records its mounter's credentials and creates its work files and
// copy-ups with them; through an idmapped upper layer only an fsuid inside
// the range can create files. The thread is never returned to the Go
// scheduler: it exits with the goroutine, taking its credentials along.
func asFSID(id uint32, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := setFSID(int(id)); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}

// setFSID sets this thread's fsuid and fsgid to id (setfsuid(2) reports no
// failure: a second call returns the value in force) and makes its permitted
// capabilities effective.
func setFSID(id int) error {
	for _, set := range []func(int) (int, error){unix.SetfsuidRetUid, unix.SetfsgidRetGid} {
		_, _ = set(id)
		if now, err := set(id); err != nil || now != id {
			return fmt.Errorf("set filesystem id %d: in force %d: %v", id, now, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
