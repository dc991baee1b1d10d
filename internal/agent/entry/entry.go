// Package entry builds the envd EntryInfo of a file (docs/wire/envd.md,
// Stat) and creates directories owned by a sandbox user. Both the Filesystem
// RPC service and the /files HTTP handler use it.
package entry

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/cubby-dev/cubby/internal/envdpb/filesystem"
)

// MetadataPrefix is the xattr namespace holding a file's user metadata: the
// X-Metadata-<Key> upload header is stored as "user.e2b.<key>" (docs/wire/envd.md).
const MetadataPrefix = "user.e2b."

// Builder builds EntryInfo messages and caches uid/gid → name lookups.
// It is not safe for concurrent use; create one per request or goroutine.
type Builder struct {
	users  map[uint32]string
	groups map[uint32]string
}

// NewBuilder returns a Builder with empty name caches.
func NewBuilder() *Builder {
	return &Builder{users: map[uint32]string{}, groups: map[uint32]string{}}
}

// Build describes the file at fsPath (lstat, so a symlink itself) and reports it
// under path (the name clients asked for; name is its base). Shape (docs/wire/envd.md):
//   - size is the lstat size in bytes; permissions is Go's FileMode.String() of the
//     lstat mode ("-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx");
//   - for a symlink, symlinkTarget is the resolved absolute target and type/mode are
//     the target's (type SYMLINK and the link's own mode when the target is missing);
//   - mode is the permission bits (0o644 → 420);
//   - owner/group are names, numeric strings when the lookup fails;
//   - metadata comes from the user.e2b.* xattrs (of the target for a symlink).
//
// The error wraps fs.ErrNotExist when fsPath does not exist.
func (b *Builder) Build(fsPath, path string) (*filesystem.EntryInfo, error) {
	fi, err := os.Lstat(fsPath)
	if err != nil {
		return nil, fmt.Errorf("lstat %s: %w", fsPath, err)
	}
	e := &filesystem.EntryInfo{
		Name:         filepath.Base(path),
		Type:         fileType(fi.Mode()),
		Path:         path,
		Size:         fi.Size(),
		Mode:         uint32(fi.Mode().Perm()),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = b.userName(st.Uid)
		e.Group = b.groupName(st.Gid)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target := symlinkTarget(fsPath)
		e.SymlinkTarget = &target
		if ti, err := os.Stat(fsPath); err == nil {
			e.Type = fileType(ti.Mode())
			e.Mode = uint32(ti.Mode().Perm())
		}
	}
	if md := Metadata(fsPath); len(md) > 0 {
		e.Metadata = md
	}
	return e, nil
}

// fileType maps a Go file mode to the envd FileType (devices, fifos and sockets
// are FILE_TYPE_UNSPECIFIED).
func fileType(m fs.FileMode) filesystem.FileType {
	switch {
	case m.IsRegular():
		return filesystem.FileType_FILE_TYPE_FILE
	case m.IsDir():
		return filesystem.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return filesystem.FileType_FILE_TYPE_SYMLINK
	default:
		return filesystem.FileType_FILE_TYPE_UNSPECIFIED
	}
}

// symlinkTarget resolves the link at p to an absolute path: fully resolved when the
// chain can be followed, else the raw link text made absolute against p's directory.
func symlinkTarget(p string) string {
	if t, err := filepath.EvalSymlinks(p); err == nil {
		if abs, err := filepath.Abs(t); err == nil {
			return abs
		}
		return t
	}
	raw, err := os.Readlink(p)
	if err != nil {
		return ""
	}
	if filepath.IsAbs(raw) {
		return filepath.Clean(raw)
	}
	return filepath.Join(filepath.Dir(p), raw)
}

func (b *Builder) userName(uid uint32) string {
	if n, ok := b.users[uid]; ok {
		return n
	}
	id := strconv.FormatUint(uint64(uid), 10)
	n := id
	if u, err := user.LookupId(id); err == nil {
		n = u.Username
	}
	b.users[uid] = n
	return n
}

func (b *Builder) groupName(gid uint32) string {
	if n, ok := b.groups[gid]; ok {
		return n
	}
	id := strconv.FormatUint(uint64(gid), 10)
	n := id
	if g, err := user.LookupGroupId(id); err == nil {
		n = g.Name
	}
	b.groups[gid] = n
	return n
}

// Metadata reads the user.e2b.* xattrs of p (following symlinks) as a map keyed
// without the prefix. A file without metadata, a filesystem without xattr support
// and any read error all yield nil: metadata is best effort (docs/wire/envd.md).
func Metadata(p string) map[string]string {
	names, err := listXattrs(p)
	if err != nil {
		return nil
	}
	var md map[string]string
	for _, name := range names {
		key, ok := strings.CutPrefix(name, MetadataPrefix)
		if !ok || key == "" {
			continue
		}
		val, err := getXattr(p, name)
		if err != nil {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = val
	}
	return md
}

// listXattrs returns the xattr names of p, retrying when the list grows between
// the size query and the read.
func listXattrs(p string) ([]string, error) {
	for range 4 {
		n, err := unix.Listxattr(p, nil)
		if err != nil || n == 0 {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Listxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var names []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				names = append(names, s)
			}
		}
		return names, nil
	}
	return nil, fmt.Errorf("listxattr %s: %w", p, unix.ERANGE)
}

// getXattr returns the value of xattr name on p.
func getXattr(p, name string) (string, error) {
	for range 4 {
		n, err := unix.Getxattr(p, name, nil)
		if err != nil || n == 0 {
			return "", err
		}
		buf := make([]byte, n)
		n, err = unix.Getxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("getxattr %s %s: %w", p, name, unix.ERANGE)
}

// MkdirAll creates dir and any missing parents like `mkdir -p`, giving every
// directory it creates mode 0755 (independent of the umask) and owner uid:gid
// (docs/wire/envd.md: created entries belong to the user). Existing directories are left
// alone. A path component that exists but is not a directory yields an error
// wrapping syscall.ENOTDIR.
func MkdirAll(dir string, uid, gid int) error {
	fi, err := os.Stat(dir)
	if err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("stat %s: %w", dir, err)
	}
	if parent := filepath.Dir(dir); parent != dir {
		if err := MkdirAll(parent, uid, gid); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if fi, serr := os.Stat(dir); serr == nil && fi.IsDir() {
			return nil // created concurrently
		}
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", dir, err)
	}
	if err := os.Lchown(dir, uid, gid); err != nil {
		return fmt.Errorf("chown %s: %w", dir, err)
	}
	return nil
}

// Upload temporary files. /files writes land in a temporary file next to the
// destination that is renamed over it when complete; the name says whether the
// upload replaces an existing file so that directory watchers can report the
// rename as the CREATE/WRITE events a direct write would have caused.
const (
	uploadTempPrefix  = ".cubby-upload-"
	uploadTempNew     = uploadTempPrefix + "n-"
	uploadTempReplace = uploadTempPrefix + "r-"
)

// UploadTempPattern is the os.CreateTemp pattern of an upload's temporary file;
// replacing tells whether the destination already exists.
func UploadTempPattern(replacing bool) string {
	if replacing {
		return uploadTempReplace + "*"
	}
	return uploadTempNew + "*"
}

// UploadTemp reports whether base (a file name without directory) names an
// upload's temporary file and, if so, whether that upload replaces a file.
func UploadTemp(base string) (isTemp, replacing bool) {
	if !strings.HasPrefix(base, uploadTempPrefix) {
		return false, false
	}
	return true, strings.HasPrefix(base, uploadTempReplace)
}
