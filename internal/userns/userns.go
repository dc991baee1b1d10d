// Package userns gives each sandbox a user namespace of its own, owned by an
// unprivileged host uid: a Range of 65536 host uids and gids (RangeSize) that
// maps the sandbox's ids 0..65535, a host-wide Allocator of such ranges, and
// Create, which makes the namespace (and a network namespace owned by it) and
// keeps both alive through bind mounts of their nsfs files.
//
// Ownership matters because the kernel charges per-user counts (inotify
// instances and watches, RLIMIT_NPROC, ...) at every level of the user
// namespace hierarchy, above the first to the owner of each namespace (its
// ucount functions inc_ucount and is_rlimit_overlimit walk from a namespace
// to its parent's count of the namespace's owner, up to the initial
// namespace). A namespace created by root (as an OCI runtime running as root
// does) would charge everything a sandbox holds to host root again. Create
// therefore lets a helper process that already runs as the range's first
// host uid clone the namespace (a new namespace is owned by its creator's
// effective uid, user_namespaces(7)); the server, as root in the parent
// namespace, then writes the full uid and gid maps, which an unprivileged
// writer could not.
package userns

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/nsfs"
)

// RangeSize is the number of ids (uids and gids alike) of one sandbox: the
// 16-bit id space a Debian system uses, so nobody (65534) is mapped too.
const RangeSize = 65536

// Range maps ids 0..Size-1 inside a user namespace to host ids
// HostID..HostID+Size-1, for uids and gids alike.
type Range struct {
	// HostID is the host uid and gid that root (0) inside maps to.
	HostID uint32 `json:"hostID"`
	// Size is the number of mapped ids, RangeSize for sandboxes.
	Size uint32 `json:"size"`
}

// IsZero reports whether r maps nothing (user namespaces are off).
func (r Range) IsZero() bool { return r.Size == 0 }

// String is the one-line map written to /proc/<pid>/uid_map and gid_map
// (user_namespaces(7) "User and group ID mappings"): "0 <HostID> <Size>".
func (r Range) String() string {
	return fmt.Sprintf("0 %d %d", r.HostID, r.Size)
}

// validate rejects empty ranges, ranges that map host root and ranges that
// run past the last valid id (4294967294; (uid_t)-1 is invalid).
func (r Range) validate() error {
	if r.Size == 0 || r.HostID == 0 || uint64(r.HostID)+uint64(r.Size) > 1<<32-1 {
		return fmt.Errorf("invalid id range %q", r.String())
	}
	return nil
}

// Owner returns the host uid owning the user namespace whose nsfs file (a
// bind mount made by Create, or /proc/<pid>/ns/user) is at path
// (ioctl_nsfs(2) NS_GET_OWNER_UID).
func Owner(path string) (uint32, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open user namespace %s: %w", path, err)
	}
	defer unix.Close(fd)
	var uid uint32
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.NS_GET_OWNER_UID, uintptr(unsafe.Pointer(&uid))); errno != 0 {
		return 0, fmt.Errorf("owner of user namespace %s: %w", path, errno)
	}
	return uid, nil
}

// Check returns an error unless path is a mounted user namespace file, as
// Create leaves it.
func Check(path string) error { return nsfs.Check(path, unix.CLONE_NEWUSER) }
