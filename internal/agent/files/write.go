package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/agent/entry"
	"github.com/cubby-dev/cubby/internal/agent/users"
)

// errBadDestination marks a destination that cannot hold a file (400).
var errBadDestination = errors.New("bad destination")

// bodyError marks a failure to read the request body (400 rather than 500).
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "read request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// bodyReader tags the errors of the request body as bodyError.
type bodyReader struct{ r io.Reader }

func (b bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		err = &bodyError{err}
	}
	return n, err
}

// realDestination follows a symlink at dest (a write through a link replaces the
// target's content, as an O_TRUNC open would) and checks that the result is not a
// directory. It returns the path to rename onto, the mode the file gets (the
// existing file's permission bits, else 0644) and whether a file is replaced.
func realDestination(dest string) (string, fs.FileMode, bool, error) {
	real := dest
	if fi, err := os.Lstat(dest); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if t, err := filepath.EvalSymlinks(dest); err == nil {
			real = t
		}
	}
	fi, err := os.Stat(real)
	switch {
	case err == nil && fi.IsDir():
		return "", 0, false, fmt.Errorf("%w: path '%s' is a directory", errBadDestination, dest)
	case err == nil && fi.Mode().IsRegular():
		return real, fi.Mode().Perm(), true, nil
	case err == nil:
		return "", 0, false, fmt.Errorf("%w: path '%s' is not a regular file", errBadDestination, dest)
	case errors.Is(err, syscall.ENOTDIR):
		return "", 0, false, fmt.Errorf("%w: a parent of '%s' is not a directory", errBadDestination, dest)
	}
	return real, 0o644, false, nil
}

// writeFile stores src at dest for u (docs/wire/envd.md, write semantics): parents are
// created and owned by u, the file gets mode 0644 (or the replaced file's mode),
// owner u and exactly the user.e2b.* xattrs of md. The content lands in a
// temporary file next to the destination that is renamed over it only once fully
// written and synced, so a failure (ENOSPC, a broken body…) never leaves a partial
// file and the temporary file is always removed. It returns the metadata actually
// stored (nil when the filesystem has no xattr support).
func (h *Handler) writeFile(u *users.User, dest string, src io.Reader, md map[string]string) (stored map[string]string, err error) {
	real, mode, replacing, err := realDestination(dest)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(real)
	if err := entry.MkdirAll(dir, int(u.UID), int(u.GID)); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("%w: %w", errBadDestination, err)
		}
		return nil, fmt.Errorf("create parent directories of %s: %w", dest, err)
	}
	tmp, err := os.CreateTemp(dir, entry.UploadTempPattern(replacing))
	if err != nil {
		return nil, fmt.Errorf("create temporary file in %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, bodyReader{src}); err != nil {
		return nil, fmt.Errorf("write %s: %w", dest, err)
	}
	stored, err = h.finish(tmp, u, mode, md)
	if err != nil {
		return nil, fmt.Errorf("write %s: %w", dest, err)
	}
	if err := os.Rename(tmp.Name(), real); err != nil {
		return nil, fmt.Errorf("rename into %s: %w", real, err)
	}
	return stored, nil
}

// finish gives the temporary file its mode, owner and metadata, then syncs and
// closes it. It returns the metadata stored: md, or nil when xattrs are unsupported.
func (h *Handler) finish(f *os.File, u *users.User, mode fs.FileMode, md map[string]string) (map[string]string, error) {
	if err := f.Chmod(mode); err != nil {
		return nil, fmt.Errorf("chmod: %w", err)
	}
	if err := f.Chown(int(u.UID), int(u.GID)); err != nil {
		return nil, fmt.Errorf("chown: %w", err)
	}
	stored, err := h.setMetadata(f, md)
	if err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("sync: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	return stored, nil
}

// setMetadata stores md as user.e2b.* xattrs of the fresh file f. A filesystem
// without user xattrs is logged and yields nil (docs/wire/envd.md: envd carries on).
func (h *Handler) setMetadata(f *os.File, md map[string]string) (map[string]string, error) {
	for k, v := range md {
		err := unix.Fsetxattr(int(f.Fd()), entry.MetadataPrefix+k, []byte(v), 0)
		if errors.Is(err, unix.ENOTSUP) {
			h.log.Warn("filesystem does not support xattrs, metadata dropped", "path", f.Name())
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("set metadata %q: %w", k, err)
		}
	}
	return md, nil
}

// freeBytes returns the bytes available to unprivileged users (as df shows) on
// the filesystem that holds p or, when p does not exist yet, its nearest
// existing ancestor.
func freeBytes(p string) (uint64, error) {
	for {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			return st.Bavail * uint64(st.Bsize), nil
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, unix.ENOENT) || parent == p {
			return 0, fmt.Errorf("statfs %s: %w", p, err)
		}
		p = parent
	}
}

// noSpace reports whether err means the filesystem or quota is full.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}
