package layer

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// tree is an open directory tree whose paths are resolved by the kernel
// inside it: symlinks, absolute or relative, never lead out of the tree
// (openat2 RESOLVE_IN_ROOT), as they resolve inside a container rooted there.
type tree struct {
	dir  string // the tree's host path (symlink-free)
	root int    // O_PATH descriptor of the tree's root directory

	cachedRel string // parent directory last opened by parent, or "" for none
	cachedFD  int
}

// openTree opens dir for resolving paths inside it. Close releases it.
func openTree(dir string) (*tree, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(real, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return &tree{dir: real, root: fd, cachedFD: -1}, nil
}

func (t *tree) Close() {
	t.forget()
	unix.Close(t.root)
}

// forget drops the cached parent descriptor; called whenever an entry is
// removed or replaced, since the cached directory may be among them.
func (t *tree) forget() {
	if t.cachedFD >= 0 {
		unix.Close(t.cachedFD)
	}
	t.cachedRel, t.cachedFD = "", -1
}

// resolveHow resolves every component inside the tree and never through
// /proc magic links.
var resolveHow = uint64(unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS)

// openDir opens the directory rel ("" or "." = the root) inside the tree.
func (t *tree) openDir(rel string) (int, error) {
	if rel == "" || rel == "." {
		rel = "."
	}
	fd, err := unix.Openat2(t.root, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: resolveHow,
	})
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: "/" + rel, Err: err}
	}
	return fd, nil
}

// parent returns a descriptor of rel's parent directory (created, with mode
// 0755 and owner root, when missing) and rel's last component. The
// descriptor stays owned by the tree: callers must not close it.
func (t *tree) parent(rel string) (int, string, error) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if t.cachedFD >= 0 && t.cachedRel == dir {
		return t.cachedFD, base, nil
	}
	fd, err := t.ensureDir(dir)
	if err != nil {
		return -1, "", err
	}
	t.forget()
	t.cachedRel, t.cachedFD = dir, fd
	return fd, base, nil
}

// maxSymlinkHops bounds how many dangling symlinks ensureDir follows to
// create their targets (the kernel's own limit is 40).
const maxSymlinkHops = 40

// ensureDir opens directory rel, creating missing components (0755, root).
func (t *tree) ensureDir(rel string) (int, error) {
	return t.ensureDirHops(rel, 0)
}

// ensureDirHops is ensureDir after hops dangling symlinks. A component that
// is a symlink to a missing directory gets that directory created where the
// symlink points inside the tree, as a container runtime would see it.
func (t *tree) ensureDirHops(rel string, hops int) (int, error) {
	fd, err := t.openDir(rel)
	if err == nil || !errors.Is(err, unix.ENOENT) || rel == "" || rel == "." {
		return fd, err
	}
	up, base := path.Split(rel)
	pfd, err := t.ensureDirHops(strings.TrimSuffix(up, "/"), hops)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	err = unix.Mkdirat(pfd, base, 0o755)
	if errors.Is(err, unix.EEXIST) && hops < maxSymlinkHops {
		if next, ok := t.danglingTarget(pfd, base); ok {
			fd, err := t.ensureDirHops(next, hops+1)
			if err != nil {
				return -1, err
			}
			unix.Close(fd)
			return t.openDir(rel)
		}
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, &os.PathError{Op: "mkdir", Path: "/" + rel, Err: err}
	}
	return t.openDir(rel)
}

// danglingTarget returns where the symlink base in directory pfd points,
// as a path relative to the tree root, and whether base is a symlink.
func (t *tree) danglingTarget(pfd int, base string) (string, bool) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(pfd, base, buf)
	if err != nil {
		return "", false
	}
	target := string(buf[:n])
	if path.IsAbs(target) {
		return cleanRel(target), true
	}
	here, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", pfd))
	if err != nil {
		return "", false
	}
	dir, ok := strings.CutPrefix(here, t.dir)
	if !ok || (dir != "" && !strings.HasPrefix(dir, "/")) {
		return "", false
	}
	return cleanRel(path.Join(dir, target)), true
}

// lstatAt stats name in dirfd without following a final symlink; ok is false
// when it does not exist.
func lstatAt(dirfd int, name string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return st, false, nil
	}
	return st, err == nil, err
}

// removeAt removes name in dirfd, recursively when it is a directory. A
// missing name is not an error. Symlinks are removed, never followed.
func removeAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	err = clearDir(sub, nil)
	unix.Close(sub)
	if err != nil {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// clearDir removes every entry of the directory dirfd for which keep (may be
// nil) returns false.
func clearDir(dirfd int, keep func(name string) bool) error {
	names, err := readDirNames(dirfd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if keep != nil && keep(name) {
			continue
		}
		if err := removeAt(dirfd, name); err != nil {
			return err
		}
	}
	return nil
}

// readDirNames lists the directory dirfd (without "." and ".."), sorted by
// the caller if needed. It does not move dirfd's own offset: it reads
// through a duplicate descriptor.
func readDirNames(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open directory: %w", err)
	}
	f := os.NewFile(uintptr(fd), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read directory: %w", err)
	}
	return names, nil
}

// cleanRel turns a tar entry name into a path relative to the tree root
// ("" for the root itself): leading "/" and "./" are dropped and ".."
// cannot climb above the root.
func cleanRel(name string) string {
	p := path.Clean("/" + name)
	return strings.TrimPrefix(p, "/")
}

// ReadFile reads the regular file name inside the tree dir, resolving every
// symlink inside the tree (a symlinked /etc/passwd cannot point at the
// host's), up to limit bytes. Errors: fs errors (fs.ErrNotExist for a
// missing file), or name is not a regular file.
func ReadFile(dir, name string, limit int64) ([]byte, error) {
	t, err := openTree(dir)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	fd, err := unix.Openat2(t.root, cleanRel(name), &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK, Resolve: resolveHow,
	})
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", name)
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// IsDir reports whether name inside the tree dir is a directory (symlinks
// resolved inside the tree).
func IsDir(dir, name string) bool {
	t, err := openTree(dir)
	if err != nil {
		return false
	}
	defer t.Close()
	fd, err := t.openDir(cleanRel(name))
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// Exists reports whether name exists inside the tree dir (a final symlink
// counts even when dangling; earlier ones resolve inside the tree).
func Exists(dir, name string) bool {
	t, err := openTree(dir)
	if err != nil {
		return false
	}
	defer t.Close()
	rel := cleanRel(name)
	if rel == "" {
		return true
	}
	pfd, err := t.openDir(path.Dir(rel))
	if err != nil {
		return false
	}
	defer unix.Close(pfd)
	_, ok, _ := lstatAt(pfd, path.Base(rel))
	return ok
}
