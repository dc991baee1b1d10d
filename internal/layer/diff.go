package layer

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Overlayfs markers in an upper directory (Documentation/filesystems/overlayfs.rst):
// a whiteout is a 0/0 character device, an opaque directory carries the
// opaque xattr ("trusted." on the host, "user." with the userxattr option).
var (
	opaqueXattrs      = []string{"trusted.overlay.opaque", "user.overlay.opaque"}
	unsupportedXattrs = []string{"trusted.overlay.redirect", "user.overlay.redirect", "trusted.overlay.metacopy", "user.overlay.metacopy"}
)

// DiffOptions tune WriteDiff.
type DiffOptions struct {
	// Exclude lists paths (absolute, as seen inside the sandbox, e.g.
	// "/opt/cubby") left out of the layer with everything below them: mount
	// points and state the runtime and agent create, which are not the
	// sandbox's changes.
	Exclude []string
	// Lower, when set, is the read-only tree the overlay stacks upper on: a
	// directory the overlay only copied up (same type, owner, mode and kept
	// xattrs as in Lower, not opaque) is written only when something below
	// it is, so a sandbox that changed nothing yields an empty layer.
	Lower string
}

// WriteDiff writes the overlayfs upper directory upper (the changes a
// sandbox made to its read-only tree) to w as an uncompressed OCI layer tar:
// whiteout devices become ".wh.<name>" entries, opaque directories get a
// ".wh..wh..opq" marker, files with several links inside upper become tar
// hard links, entries are sorted by name (equal trees give equal tars for
// equal mtimes). Owners are kept numerically; extended attributes outside
// user.* and security.capability are dropped; devices, sockets and excluded
// paths are skipped. Nothing is followed: a symlink is written as a symlink.
//
// The sandbox must be stopped (its upper directory quiescent). Errors: an
// upper written with overlay redirect_dir or metacopy (unsupported), I/O
// errors, w's errors, ctx's error.
func WriteDiff(ctx context.Context, upper string, w io.Writer, opts DiffOptions) (Stats, error) {
	fd, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stats{}, fmt.Errorf("write diff: open %s: %w", upper, err)
	}
	defer unix.Close(fd)
	d := &differ{ctx: ctx, tw: tar.NewWriter(w), links: map[inode]string{}, exclude: map[string]bool{}}
	for _, p := range opts.Exclude {
		d.exclude[cleanRel(p)] = true
	}
	if opts.Lower != "" {
		lt, err := openTree(opts.Lower)
		if err != nil {
			return Stats{}, fmt.Errorf("write diff: lower: %w", err)
		}
		defer lt.Close()
		d.lowerTree = lt
	}
	if err := d.walk(fd, ""); err != nil {
		return d.stats, fmt.Errorf("write diff: %w", err)
	}
	if err := d.tw.Close(); err != nil {
		return d.stats, fmt.Errorf("write diff: %w", err)
	}
	return d.stats, nil
}

type inode struct{ dev, ino uint64 }

// differ is the state of one WriteDiff.
type differ struct {
	ctx       context.Context
	tw        *tar.Writer
	stats     Stats
	links     map[inode]string // first path written for each multiply linked file
	exclude   map[string]bool
	lowerTree *tree         // DiffOptions.Lower, nil when unset
	pending   []*tar.Header // copied-up directories not written yet, outermost first
}

// write writes hdr after any pending parent directories.
func (d *differ) write(hdr *tar.Header) error {
	for _, p := range d.pending {
		if err := d.tw.WriteHeader(p); err != nil {
			return err
		}
	}
	d.pending = d.pending[:0]
	return d.tw.WriteHeader(hdr)
}

// walk writes the entries of directory fd (at rel) in name order.
func (d *differ) walk(fd int, rel string) error {
	names, err := readDirNames(fd)
	if err != nil {
		return fmt.Errorf("%s: %w", "/"+rel, err)
	}
	slices.Sort(names)
	for _, name := range names {
		if err := d.ctx.Err(); err != nil {
			return err
		}
		p := path.Join(rel, name)
		if d.exclude[p] {
			d.stats.Skipped++
			continue
		}
		if err := d.entry(fd, name, p); err != nil {
			return fmt.Errorf("%s: %w", "/"+p, err)
		}
	}
	return nil
}

func (d *differ) entry(dirfd int, name, rel string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	hdr := &tar.Header{
		Name: rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
		ModTime: time.Unix(st.Mtim.Unix()), Format: tar.FormatPAX,
	}
	d.stats.Entries++
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return d.dir(dirfd, name, rel, hdr)
	case unix.S_IFREG:
		return d.file(dirfd, name, &st, hdr)
	case unix.S_IFLNK:
		return d.symlink(dirfd, name, hdr)
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return d.write(hdr)
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			return d.whiteoutEntry(path.Join(path.Dir(rel), whiteoutPrefix+name), hdr.ModTime)
		}
	}
	d.stats.Skipped++ // devices, sockets
	return nil
}

func (d *differ) dir(dirfd int, name, rel string, hdr *tar.Header) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	xattrs, err := d.xattrs(fd)
	if err != nil {
		return err
	}
	hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
	hdr.PAXRecords = paxRecords(xattrs)
	opaque, err := isOpaque(fd)
	if err != nil {
		return err
	}
	if !opaque && d.copiedUp(rel, hdr, xattrs) {
		return d.lazyDir(fd, rel, hdr)
	}
	if err := d.write(hdr); err != nil {
		return err
	}
	if opaque {
		if err := d.whiteoutEntry(path.Join(rel, opaqueMarker), hdr.ModTime); err != nil {
			return err
		}
	}
	return d.walk(fd, rel)
}

// lazyDir walks a copied-up directory whose header is written only before
// the first entry below it.
func (d *differ) lazyDir(fd int, rel string, hdr *tar.Header) error {
	d.pending = append(d.pending, hdr)
	depth := len(d.pending)
	if err := d.walk(fd, rel); err != nil {
		return err
	}
	if len(d.pending) >= depth {
		d.pending = d.pending[:depth-1] // nothing below it changed
		d.stats.Entries--
	}
	return nil
}

// copiedUp reports whether directory rel exists in the lower tree with the
// same owner, mode and kept xattrs.
func (d *differ) copiedUp(rel string, hdr *tar.Header, xattrs map[string]string) bool {
	if d.lowerTree == nil {
		return false
	}
	fd, err := d.lowerTree.openDir(rel)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || int(st.Uid) != hdr.Uid || int(st.Gid) != hdr.Gid || int64(st.Mode&0o7777) != hdr.Mode {
		return false
	}
	lx, err := d.xattrsOf(fd)
	return err == nil && maps.Equal(lx, xattrs)
}

func (d *differ) file(dirfd int, name string, st *unix.Stat_t, hdr *tar.Header) error {
	key := inode{st.Dev, st.Ino}
	if first, ok := d.links[key]; ok && st.Nlink > 1 {
		hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
		d.stats.Linked++
		return d.write(hdr)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	xattrs, err := d.xattrs(fd)
	if err != nil {
		return err
	}
	hdr.Typeflag, hdr.Size, hdr.PAXRecords = tar.TypeReg, st.Size, paxRecords(xattrs)
	if err := d.write(hdr); err != nil {
		return err
	}
	n, err := io.CopyN(d.tw, f, st.Size)
	d.stats.Bytes += n
	if err != nil {
		return fmt.Errorf("copy content: %w", err)
	}
	if st.Nlink > 1 {
		d.links[key] = hdr.Name
	}
	return nil
}

func (d *differ) symlink(dirfd int, name string, hdr *tar.Header) error {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return err
	}
	hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, string(buf[:n])
	return d.write(hdr)
}

func (d *differ) whiteoutEntry(name string, mtime time.Time) error {
	d.stats.Whiteout++
	return d.write(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, ModTime: mtime, Format: tar.FormatPAX})
}

// xattrsOf returns the kept extended attributes of fd (no stats, no checks).
func (d *differ) xattrsOf(fd int) (map[string]string, error) {
	names, err := listXattrs(fd)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range names {
		if keptXattr(name) {
			v, err := getXattr(fd, name)
			if err != nil {
				return nil, err
			}
			out[name] = string(v)
		}
	}
	return out, nil
}

// xattrs returns the kept extended attributes of fd and fails on overlay
// attributes that WriteDiff cannot express in a layer.
func (d *differ) xattrs(fd int) (map[string]string, error) {
	names, err := listXattrs(fd)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range names {
		if slices.Contains(unsupportedXattrs, name) {
			return nil, fmt.Errorf("overlay attribute %s: mount the sandbox's overlay without redirect_dir and metacopy", name)
		}
		if !keptXattr(name) {
			if !slices.Contains(opaqueXattrs, name) && !strings.HasPrefix(name, "trusted.overlay.") {
				d.stats.Dropped++
			}
			continue
		}
		v, err := getXattr(fd, name)
		if err != nil {
			return nil, err
		}
		out[name] = string(v)
		d.stats.Xattrs++
	}
	return out, nil
}

func isOpaque(fd int) (bool, error) {
	for _, name := range opaqueXattrs {
		v, err := getXattr(fd, name)
		if errors.Is(err, unix.ENODATA) || errors.Is(err, unix.EOPNOTSUPP) {
			continue
		}
		if err != nil {
			return false, err
		}
		if string(v) == "y" {
			return true, nil
		}
	}
	return false, nil
}

func paxRecords(xattrs map[string]string) map[string]string {
	if len(xattrs) == 0 {
		return nil
	}
	out := make(map[string]string, len(xattrs))
	for k, v := range xattrs {
		out[paxXattrPrefix+k] = v
	}
	return out
}

// listXattrs lists the extended attribute names of fd.
func listXattrs(fd int) ([]string, error) {
	size, err := unix.Flistxattr(fd, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return nil, nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	size, err = unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, fmt.Errorf("list xattrs: %w", err)
	}
	var names []string
	for _, n := range strings.Split(string(buf[:size]), "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

func getXattr(fd int, name string) ([]byte, error) {
	size, err := unix.Fgetxattr(fd, name, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	size, err = unix.Fgetxattr(fd, name, buf)
	if err != nil {
		return nil, fmt.Errorf("get xattr %s: %w", name, err)
	}
	return buf[:size], nil
}
