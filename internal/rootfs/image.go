package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// mkfsArgs format an empty ext4 without a journal, without reserved blocks and with
// lazy inode-table initialisation, so that formatting writes only a few MiB of metadata
// and the image stays sparse.
func mkfsArgs(path string) []string {
	return []string{"-q", "-F", "-t", "ext4", "-b", "4096", "-O", "^has_journal", "-m", "0",
		"-E", "lazy_itable_init=1,lazy_journal_init=1", path}
}

// cachedImage returns the path of a freshly formatted ext4 image of size bytes in the
// cache directory, formatting it on first use.
func (m *Manager) cachedImage(ctx context.Context, size int64) (string, error) {
	path := filepath.Join(m.cacheDir, "ext4-"+strconv.FormatInt(size, 10)+".img")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(m.cacheDir, 0o700); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	tmp, err := os.CreateTemp(m.cacheDir, ".ext4-*.img")
	if err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	err = tmp.Truncate(size)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	if out, err := exec.CommandContext(ctx, m.mkfs, mkfsArgs(tmp.Name())...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("format %d-byte image: %s: %w", size, out, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	m.log.Debug("formatted disk image", "path", path, "bytes", size)
	return path, nil
}

// sparseCopy creates dst (which must not exist) as a copy of src that keeps src's
// holes: a reflink when the filesystem supports it, otherwise only the data extents
// (SEEK_DATA/SEEK_HOLE) are copied with copy_file_range.
func sparseCopy(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy image: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("copy image: %w", err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("copy image: %w", cerr)
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return nil
	}
	fi, err := in.Stat()
	if err != nil {
		return fmt.Errorf("copy image: %w", err)
	}
	if err := out.Truncate(fi.Size()); err != nil {
		return fmt.Errorf("copy image: %w", err)
	}
	return copyExtents(in, out, fi.Size())
}

// copyExtents copies every data extent of in to the same offset of out.
func copyExtents(in, out *os.File, size int64) error {
	for off := int64(0); off < size; {
		start, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only a hole remains
		}
		if err != nil {
			return fmt.Errorf("copy image: SEEK_DATA: %w", err)
		}
		end, err := unix.Seek(int(in.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("copy image: SEEK_HOLE: %w", err)
		}
		if err := copyRange(in, out, start, end); err != nil {
			return err
		}
		off = end
	}
	return nil
}

func copyRange(in, out *os.File, start, end int64) error {
	for start < end {
		roff, woff := start, start
		n, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(end-start), 0)
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			return copyBuffered(in, out, start, end)
		}
		if err != nil {
			return fmt.Errorf("copy image: copy_file_range: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("copy image: copy_file_range at %d: %w", start, io.ErrUnexpectedEOF)
		}
		start += int64(n)
	}
	return nil
}

// copyBuffered copies [start,end) through user space, for filesystems where
// copy_file_range cannot be used between in and out.
func copyBuffered(in, out *os.File, start, end int64) error {
	src := io.NewSectionReader(in, start, end-start)
	dst := io.NewOffsetWriter(out, start)
	if _, err := io.Copy(dst, src); err != nil {
		return fmt.Errorf("copy image: %w", err)
	}
	return nil
}
