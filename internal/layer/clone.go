package layer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Clone makes dst (which must not exist; its parent must, on the same
// filesystem as src) a copy of the immutable tree src in which directories
// are new (same owner, mode, kept extended attributes and mtime) and every
// other entry is a hard link to src's inode; a file whose link count is
// exhausted (EMLINK) is copied. Apply on dst then never changes src: it
// replaces files rather than writing them. src must not change meanwhile.
// Errors: dst exists, src is unreadable, I/O errors, ctx's error; on error
// dst is left partially written for the caller to remove.
func Clone(ctx context.Context, src, dst string) (Stats, error) {
	sfd, err := unix.Open(src, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stats{}, fmt.Errorf("clone %s: %w", src, err)
	}
	defer unix.Close(sfd)
	if err := unix.Mkdir(dst, 0o700); err != nil {
		return Stats{}, fmt.Errorf("clone to %s: %w", dst, err)
	}
	dfd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Stats{}, fmt.Errorf("clone to %s: %w", dst, err)
	}
	defer unix.Close(dfd)
	c := &cloner{ctx: ctx}
	if err := c.dir(sfd, dfd); err != nil {
		return c.stats, fmt.Errorf("clone %s to %s: %w", src, dst, err)
	}
	return c.stats, nil
}

type cloner struct {
	ctx   context.Context
	stats Stats
}

// dir copies the entries of sfd into dfd, then dfd's metadata from sfd.
func (c *cloner) dir(sfd, dfd int) error {
	names, err := readDirNames(sfd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		if err := c.entry(sfd, dfd, name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return c.copyMeta(sfd, dfd)
}

func (c *cloner) entry(sfd, dfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(sfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	c.stats.Entries++
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		err := unix.Linkat(sfd, name, dfd, name, 0)
		if errors.Is(err, unix.EMLINK) && st.Mode&unix.S_IFMT == unix.S_IFREG {
			return c.copyFile(sfd, dfd, name, &st)
		}
		if err == nil {
			c.stats.Linked++
		}
		return err
	}
	if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
		return err
	}
	s, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	d, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	return c.dir(s, d)
}

// copyMeta gives directory dfd the owner, mode, kept xattrs and times of sfd.
func (c *cloner) copyMeta(sfd, dfd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return err
	}
	if err := c.copyOwnerXattrs(sfd, dfd, &st); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(dfd, ".", ts, 0)
}

func (c *cloner) copyOwnerXattrs(sfd, dfd int, st *unix.Stat_t) error {
	if err := unix.Fchown(dfd, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(dfd, st.Mode&0o7777); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	names, err := listXattrs(sfd)
	if err != nil {
		return err
	}
	for _, name := range names {
		if !keptXattr(name) {
			continue
		}
		v, err := getXattr(sfd, name)
		if err != nil {
			return err
		}
		if err := unix.Fsetxattr(dfd, name, v, 0); err != nil {
			return fmt.Errorf("set xattr %s: %w", name, err)
		}
		c.stats.Xattrs++
	}
	return nil
}

// copyFile copies a regular file whose inode has no links left.
func (c *cloner) copyFile(sfd, dfd int, name string, st *unix.Stat_t) error {
	in, err := unix.Openat(sfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	src := os.NewFile(uintptr(in), name)
	defer src.Close()
	out, err := unix.Openat(dfd, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(out), name)
	n, err := io.Copy(dst, src)
	c.stats.Bytes += n
	if err == nil {
		err = c.copyOwnerXattrs(in, out, st)
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return setTimes(dfd, name, time.Unix(st.Mtim.Unix()))
}
