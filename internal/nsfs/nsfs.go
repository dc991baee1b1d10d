// Package nsfs keeps Linux namespaces alive without a process in them: a bind
// mount of a namespace's nsfs file (/proc/<pid>/ns/<type>) on an empty file
// holds a reference to the namespace, as ip-netns(8) does for network
// namespaces (namespaces(7), "The /proc/[pid]/ns/ directory").
package nsfs

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Bind bind-mounts the namespace file src (e.g. /proc/<pid>/ns/user or
// /proc/thread-self/ns/net) at dst, created as an empty file; dst must not
// exist. On error dst is removed.
func Bind(src, dst string) error {
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_RDONLY|unix.O_CLOEXEC, 0o444)
	if err != nil {
		return fmt.Errorf("create namespace file %s: %w", dst, err)
	}
	f.Close()
	if err := unix.Mount(src, dst, "none", unix.MS_BIND, ""); err != nil {
		os.Remove(dst)
		return fmt.Errorf("bind-mount %s at %s: %w", src, dst, err)
	}
	return nil
}

// Remove unmounts (lazily) and removes a namespace file made by Bind. A
// missing or unmounted file is not an error. The namespace itself is freed by
// the kernel once no process, descriptor, mount or (for a user namespace)
// namespace it owns refers to it.
func Remove(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount namespace file %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove namespace file %s: %w", path, err)
	}
	return nil
}

// Check returns an error unless path is a mounted namespace file of type
// nstype, one of the CLONE_NEW* flags (ioctl_nsfs(2) NS_GET_NSTYPE).
func Check(path string, nstype int) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("namespace file %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil || st.Type != unix.NSFS_MAGIC {
		return fmt.Errorf("namespace file %s: not a mounted namespace file (%v)", path, err)
	}
	t, err := unix.IoctlRetInt(fd, unix.NS_GET_NSTYPE)
	if err != nil || t != nstype {
		return fmt.Errorf("namespace file %s: type %#x, want %#x (%v)", path, t, nstype, err)
	}
	return nil
}
