package template

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/layer"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
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

// grantableOnly keeps every attribute but file capabilities sandboxes could
// not execute (ungrantableCaps under granted). Debian's ping (cap_net_raw+ep)
// is one: without its capability it runs and uses ICMP datagram sockets.
func grantableOnly(granted uint64) func(name string, value []byte) bool {
	return func(name string, value []byte) bool {
		return name != xattrCaps || !ungrantableCaps(value, granted)
	}
}

// applyOptions apply layers to template trees: file capabilities the
// sandboxes' bounding set (oci.GrantedCaps) lacks are left out of the tree
// (the layers keep them, as the image has them).
var applyOptions = layer.ApplyOptions{KeepXattr: grantableOnly(oci.GrantedCaps())}

// dropUngrantableCaps removes from the regular files under root the file
// capabilities sandboxes could not execute (ungrantableCaps under granted),
// as applyOptions does for layers, and returns how many it removed. root
// must be a tree of its own: its files' inodes are changed in place.
func dropUngrantableCaps(root string, granted uint64) (int, error) {
	n := 0
	buf := make([]byte, 64)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		size, err := unix.Lgetxattr(path, xattrCaps, buf)
		if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ERANGE) {
			return nil // no capabilities, or not a vfs_cap_data value we know
		}
		if err != nil {
			return fmt.Errorf("read capabilities of %s: %w", path, err)
		}
		if !ungrantableCaps(buf[:size], granted) {
			return nil
		}
		if err := unix.Lremovexattr(path, xattrCaps); err != nil {
			return fmt.Errorf("drop capabilities of %s: %w", path, err)
		}
		n++
		return nil
	})
	return n, err
}
