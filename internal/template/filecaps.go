package template

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// xattrCaps is the extended attribute holding a file's capabilities (vfs_cap_data,
// linux/capability.h: little-endian magic_etc, then permitted/inheritable words).
const xattrCaps = "security.capability"

// vfs_cap_data constants (linux/capability.h).
const (
	vfsCapRevisionMask  = 0xFF000000
	vfsCapRevision1     = 0x01000000
	vfsCapFlagEffective = 0x000001
)

// ungrantableCaps reports whether the vfs_cap_data value v is marked
// effective and permits a capability outside granted (a mask of 1<<CAP_*):
// execve(2) refuses such a file under a bounding set that lacks it
// (capabilities(7), "safety checking for capability-dumb binaries").
func ungrantableCaps(v []byte, granted uint64) bool {
	if len(v) < 12 {
		return false
	}
	magic := binary.LittleEndian.Uint32(v)
	permitted := uint64(binary.LittleEndian.Uint32(v[4:]))
	if magic&vfsCapRevisionMask != vfsCapRevision1 && len(v) >= 20 {
		permitted |= uint64(binary.LittleEndian.Uint32(v[12:])) << 32
	}
	return magic&vfsCapFlagEffective != 0 && permitted&^granted != 0
}

// dropUngrantableCaps removes the file capabilities of every regular file
// below rootfs that sandboxes could not execute (ungrantableCaps) and returns
// their paths relative to rootfs. Debian's ping (cap_net_raw+ep) is one: without
// its capability it runs and uses ICMP datagram sockets. Symlinks are never
// followed (the tree is a staging copy nothing else writes to). Errors: the
// walk or an xattr call fails.
func dropUngrantableCaps(rootfs string, granted uint64) ([]string, error) {
	var dropped []string
	buf := make([]byte, 64)
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		n, err := unix.Lgetxattr(p, xattrCaps, buf)
		switch {
		case errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP):
			return nil
		case err != nil:
			return fmt.Errorf("read capabilities of %s: %w", p, err)
		case !ungrantableCaps(buf[:n], granted):
			return nil
		}
		if err := unix.Lremovexattr(p, xattrCaps); err != nil {
			return fmt.Errorf("remove capabilities of %s: %w", p, err)
		}
		rel, _ := filepath.Rel(rootfs, p)
		dropped = append(dropped, "/"+rel)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("file capabilities in %s: %w", rootfs, err)
	}
	return dropped, nil
}
