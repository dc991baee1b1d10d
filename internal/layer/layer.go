// Package layer converts between OCI image layers (tar streams, image-spec
// "layer.md": whiteouts, opaque directories, hard links) and directory trees
// on the host: Apply unpacks a layer onto a tree, WriteDiff writes an
// overlayfs upper directory (a sandbox's changes) as a layer, and Clone makes
// a copy of an immutable tree whose files are hard links to the original.
//
// Every path is resolved by the kernel inside the tree it names (openat2
// RESOLVE_IN_ROOT, or *at calls that never follow a symlink), so a hostile
// layer or sandbox cannot make these functions read or write outside it.
// Ownership is kept numerically as written (canonical IDs, root = 0).
package layer

import (
	"strings"
)

// Whiteout names of the OCI image spec (layer.md "Whiteouts").
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// Stats counts what one Apply, WriteDiff or Clone did.
type Stats struct {
	Entries  int   // tar entries or tree entries handled
	Bytes    int64 // regular-file content bytes written or read
	Skipped  int   // entries left out on purpose (devices, sockets, excluded paths)
	Xattrs   int   // extended attributes set or written
	Dropped  int   // extended attributes not carried over (outside keptXattr)
	Linked   int   // hard links made (Clone: files linked rather than copied)
	Whiteout int   // whiteouts and opaque markers handled
}

// keptXattr reports whether an extended attribute is carried between layers
// and trees: user.* attributes and file capabilities. Everything else
// (trusted.*, security.selinux, system.*) is dropped: trusted.overlay.* in a
// tree would be interpreted by the overlay a sandbox mounts over it.
func keptXattr(name string) bool {
	return strings.HasPrefix(name, "user.") && !strings.HasPrefix(name, "user.overlay.") ||
		name == "security.capability"
}

// paxXattrPrefix prefixes extended attributes in PAX records (as GNU tar and
// the Go archive/tar package write them).
const paxXattrPrefix = "SCHILY.xattr."
