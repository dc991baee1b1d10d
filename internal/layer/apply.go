package layer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Apply unpacks the uncompressed layer tar stream r onto the tree at dir,
// following the OCI image spec: entries replace what the tree holds at their
// path, ".wh.<name>" removes <name>, ".wh..wh..opq" empties its directory of
// what earlier layers put there, hard links point inside the tree. Regular
// files are always written as new inodes (an existing file is unlinked
// first), so a tree made by Clone shares no written inode with its source.
//
// Owners, modes (setuid/setgid/sticky included), mtimes and kept extended
// attributes (user.*, security.capability) are applied; character and block
// devices and sockets are skipped (a sandbox's /dev is its own) and counted
// in Stats.Skipped. Entry names and symlinks can never reach outside dir.
// Errors: a malformed tar, a hard link to a missing target or a directory,
// I/O errors, ctx's error. On error dir is left partially written.
func Apply(ctx context.Context, dir string, r io.Reader, opts ApplyOptions) (Stats, error) {
	t, err := openTree(dir)
	if err != nil {
		return Stats{}, fmt.Errorf("apply layer: %w", err)
	}
	defer t.Close()
	a := &applier{t: t, created: map[string]bool{}, opts: opts}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return a.stats, fmt.Errorf("apply layer: %w", err)
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return a.stats, fmt.Errorf("apply layer: read tar: %w", err)
		}
		if err := a.entry(hdr, tr); err != nil {
			return a.stats, fmt.Errorf("apply layer: %s: %w", hdr.Name, err)
		}
	}
	if err := a.finishDirs(); err != nil {
		return a.stats, fmt.Errorf("apply layer: %w", err)
	}
	return a.stats, nil
}

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// KeepXattr, when set, decides on each kept extended attribute (user.*,
	// security.capability) before it is set: false drops it (counted in
	// Stats.Dropped). Template trees drop file capabilities sandboxes cannot
	// grant.
	KeepXattr func(name string, value []byte) bool
}

// applier is the state of one Apply.
type applier struct {
	opts    ApplyOptions
	t       *tree
	stats   Stats
	created map[string]bool // paths this layer wrote (an opaque marker keeps them)
	dirs    []dirTimes      // directory mtimes, set once every entry is written
}

type dirTimes struct {
	rel   string
	mtime time.Time
}

func (a *applier) entry(hdr *tar.Header, r io.Reader) error {
	rel := cleanRel(hdr.Name)
	base := path.Base(rel)
	switch {
	case hdr.Typeflag == tar.TypeXGlobalHeader:
		return nil
	case base == opaqueMarker:
		return a.opaque(path.Dir(rel))
	case strings.HasPrefix(base, whiteoutPrefix):
		return a.whiteout(path.Join(path.Dir(rel), strings.TrimPrefix(base, whiteoutPrefix)))
	case rel == "":
		return a.root(hdr)
	}
	a.stats.Entries++
	switch hdr.Typeflag {
	case tar.TypeDir:
		return a.dir(rel, hdr)
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		return a.file(rel, hdr, r)
	case tar.TypeSymlink:
		return a.symlink(rel, hdr)
	case tar.TypeLink:
		return a.hardlink(rel, hdr)
	case tar.TypeFifo:
		return a.fifo(rel, hdr)
	default:
		a.stats.Skipped++
		return nil
	}
}

// whiteout removes rel (from earlier layers).
func (a *applier) whiteout(rel string) error {
	a.stats.Whiteout++
	if rel == "" || a.created[rel] {
		return nil
	}
	pfd, base, err := a.t.parent(rel)
	if err != nil {
		return err
	}
	return removeAt(pfd, base)
}

// opaque empties directory rel of every entry this layer did not write.
func (a *applier) opaque(rel string) error {
	a.stats.Whiteout++
	fd, err := a.t.ensureDir(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	a.t.forget()
	return clearDir(fd, func(name string) bool { return a.created[path.Join(rel, name)] })
}

// root applies a "./" entry's metadata to the tree's root directory.
func (a *applier) root(hdr *tar.Header) error {
	if hdr.Typeflag != tar.TypeDir {
		return errors.New("the layer's root entry is not a directory")
	}
	fd, err := a.t.openDir("")
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := a.meta(fd, hdr); err != nil {
		return err
	}
	a.dirs = append(a.dirs, dirTimes{"", hdr.ModTime})
	return nil
}

// prepare returns rel's parent and base, with whatever is at rel removed
// unless keepDir and it is a directory (then exists reports it). Removing
// rel never invalidates the cached parent descriptor, which is rel's parent.
func (a *applier) prepare(rel string, keepDir bool) (pfd int, base string, exists bool, err error) {
	pfd, base, err = a.t.parent(rel)
	if err != nil {
		return -1, "", false, err
	}
	st, ok, err := lstatAt(pfd, base)
	if err != nil || !ok {
		return pfd, base, false, err
	}
	if keepDir && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return pfd, base, true, nil
	}
	return pfd, base, false, removeAt(pfd, base)
}

func (a *applier) dir(rel string, hdr *tar.Header) error {
	pfd, base, exists, err := a.prepare(rel, true)
	if err != nil {
		return err
	}
	if !exists {
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return fmt.Errorf("mkdir: %w", err)
		}
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open directory: %w", err)
	}
	defer unix.Close(fd)
	a.created[rel] = true
	a.dirs = append(a.dirs, dirTimes{rel, hdr.ModTime})
	return a.meta(fd, hdr)
}

func (a *applier) file(rel string, hdr *tar.Header, r io.Reader) error {
	pfd, base, _, err := a.prepare(rel, false)
	if err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	f := os.NewFile(uintptr(fd), rel)
	n, err := io.Copy(f, r)
	a.stats.Bytes += n
	if err == nil {
		err = a.meta(int(f.Fd()), hdr)
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	a.created[rel] = true
	return setTimes(pfd, base, hdr.ModTime)
}

func (a *applier) symlink(rel string, hdr *tar.Header) error {
	pfd, base, _, err := a.prepare(rel, false)
	if err != nil {
		return err
	}
	if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
		return fmt.Errorf("symlink: %w", err)
	}
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	a.created[rel] = true
	return setTimes(pfd, base, hdr.ModTime)
}

func (a *applier) fifo(rel string, hdr *tar.Header) error {
	pfd, base, _, err := a.prepare(rel, false)
	if err != nil {
		return err
	}
	if err := unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0); err != nil {
		return fmt.Errorf("mkfifo: %w", err)
	}
	fd, err := unix.Openat(pfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open fifo: %w", err)
	}
	defer unix.Close(fd)
	if err := chownChmodPath(fd, hdr); err != nil {
		return err
	}
	a.created[rel] = true
	return setTimes(pfd, base, hdr.ModTime)
}

// hardlink links rel to the entry the tree already holds at the link target.
func (a *applier) hardlink(rel string, hdr *tar.Header) error {
	target := cleanRel(hdr.Linkname)
	if target == "" {
		return errors.New("hard link to the root directory")
	}
	tdir, tbase := path.Split(target)
	tfd, err := a.t.openDir(strings.TrimSuffix(tdir, "/"))
	if err != nil {
		return fmt.Errorf("hard link target %s: %w", hdr.Linkname, err)
	}
	defer unix.Close(tfd)
	st, ok, err := lstatAt(tfd, tbase)
	switch {
	case err != nil:
		return fmt.Errorf("hard link target %s: %w", hdr.Linkname, err)
	case !ok:
		return fmt.Errorf("hard link target %s does not exist", hdr.Linkname)
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return fmt.Errorf("hard link target %s is a directory", hdr.Linkname)
	}
	pfd, base, _, err := a.prepare(rel, false)
	if err != nil {
		return err
	}
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return fmt.Errorf("link: %w", err)
	}
	a.stats.Linked++
	a.created[rel] = true
	return nil
}

// meta sets owner, mode and kept extended attributes on the open fd (a
// regular file or directory). The owner is set first: chown clears setuid.
func (a *applier) meta(fd int, hdr *tar.Header) error {
	if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(fd, tarMode(hdr)); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	for name, value := range headerXattrs(hdr) {
		if !keptXattr(name) || (a.opts.KeepXattr != nil && !a.opts.KeepXattr(name, []byte(value))) {
			a.stats.Dropped++
			continue
		}
		if err := unix.Fsetxattr(fd, name, []byte(value), 0); err != nil {
			return fmt.Errorf("set xattr %s: %w", name, err)
		}
		a.stats.Xattrs++
	}
	return nil
}

// chownChmodPath sets owner and mode through an O_PATH descriptor (fifos:
// opening one for writing would block).
func chownChmodPath(fd int, hdr *tar.Header) error {
	if err := unix.Fchownat(fd, "", hdr.Uid, hdr.Gid, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	proc := fmt.Sprintf("/proc/self/fd/%d", fd)
	if err := unix.Chmod(proc, tarMode(hdr)); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	return nil
}

// finishDirs sets directory mtimes, which writing their entries changed.
func (a *applier) finishDirs() error {
	for i := len(a.dirs) - 1; i >= 0; i-- {
		d := a.dirs[i]
		if d.rel == "" {
			if err := unix.UtimesNanoAt(a.t.root, ".", timespecs(d.mtime), 0); err != nil {
				return fmt.Errorf("set times of /: %w", err)
			}
			continue
		}
		pfd, base, err := a.t.parent(d.rel)
		if err != nil {
			return err
		}
		if err := setTimes(pfd, base, d.mtime); err != nil {
			return fmt.Errorf("%s: %w", d.rel, err)
		}
	}
	return nil
}

// tarMode is the permission bits of hdr including setuid, setgid and sticky.
func tarMode(hdr *tar.Header) uint32 {
	return uint32(hdr.Mode) & 0o7777
}

// headerXattrs returns the extended attributes recorded in hdr's PAX records.
func headerXattrs(hdr *tar.Header) map[string]string {
	out := map[string]string{}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, paxXattrPrefix); ok {
			out[name] = v
		}
	}
	return out
}

func setTimes(dirfd int, name string, mtime time.Time) error {
	if err := unix.UtimesNanoAt(dirfd, name, timespecs(mtime), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times: %w", err)
	}
	return nil
}

// timespecs gives atime and mtime both as mtime (layers do not carry atimes).
func timespecs(mtime time.Time) []unix.Timespec {
	ts := unix.NsecToTimespec(mtime.UnixNano())
	return []unix.Timespec{ts, ts}
}
