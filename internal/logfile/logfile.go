// Package logfile keeps a log whose size on disk has a fixed bound whatever is
// written to it: the file is rotated into a single predecessor (<path>.1) before
// a write would take it past its cap, so the two files together never hold more
// than twice the cap. ReadTail reads the end of the log across both files.
package logfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// PrevSuffix is appended to the path of the log for its rotated predecessor.
const PrevSuffix = ".1"

// Rotating is a log file of at most Cap bytes plus one rotated predecessor of
// at most Cap bytes. It is safe for concurrent use.
type Rotating struct {
	path string
	cap  int64

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Open opens (appending) or creates the log at path with mode 0600; maxBytes
// (> 0) is the cap of each of the two files. An existing file already at or
// over the cap is rotated by the next Write. Errors come from the filesystem.
func Open(path string, maxBytes int64) (*Rotating, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("open log %s: cap %d is not positive", path, maxBytes)
	}
	f, size, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	return &Rotating{path: path, cap: maxBytes, f: f, size: size}, nil
}

func openAppend(path string) (*os.File, int64, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, fmt.Errorf("open log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("stat log: %w", err)
	}
	if !st.Mode().IsRegular() {
		_ = f.Close()
		return nil, 0, fmt.Errorf("open log %s: not a regular file", path)
	}
	return f, st.Size(), nil
}

// Write appends p as one unit: when it does not fit under the cap the file is
// first renamed to <path>.1 (replacing the previous one) and a new file is
// started. A p longer than the cap is cut to its first cap bytes, its last byte
// replaced by a newline. It returns len(p) unless the filesystem fails.
func (r *Rotating) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, os.ErrClosed
	}
	n := len(p)
	if int64(len(p)) > r.cap {
		p = append(p[:r.cap-1:r.cap-1], '\n')
	}
	if r.size > 0 && r.size+int64(len(p)) > r.cap {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	m, err := r.f.Write(p)
	r.size += int64(m)
	if err != nil {
		return m, fmt.Errorf("write log: %w", err)
	}
	return n, nil
}

// rotate renames the current file to its predecessor and starts a new one.
func (r *Rotating) rotate() error {
	if err := os.Rename(r.path, r.path+PrevSuffix); err != nil {
		return fmt.Errorf("rotate log: %w", err)
	}
	f, size, err := openAppend(r.path)
	if err != nil {
		return err
	}
	_ = r.f.Close()
	r.f, r.size = f, size
	return nil
}

// Close closes the file; later writes fail with os.ErrClosed.
func (r *Rotating) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// ReadTail returns at most the last n bytes of the log at path, the end of its
// predecessor <path>.1 first when the current file holds fewer, without a first
// partial line (see Tail), and the modification time of the current file. A
// missing predecessor is no error; a missing log is (os.ErrNotExist).
func ReadTail(path string, n int64) ([]byte, time.Time, error) {
	data, size, mtime, err := tail(path, n)
	if err != nil {
		return nil, time.Time{}, err
	}
	if size < n {
		prev, _, _, err := tail(path+PrevSuffix, n-size)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, time.Time{}, err
		}
		data = append(prev, data...)
	}
	return data, mtime, nil
}

// tail returns Tail of the file at path, its size and modification time.
func tail(path string, n int64) (data []byte, size int64, mtime time.Time, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, time.Time{}, err
	}
	data, err = Tail(f, st.Size(), n)
	return data, st.Size(), st.ModTime(), err
}

// Tail returns the last n bytes of the first size bytes of f (all of them when
// size <= n); when it had to cut, it starts after the first newline of those
// bytes, so it never returns a partial first line.
func Tail(f io.ReaderAt, size, n int64) ([]byte, error) {
	off := max(size-n, 0)
	data, err := io.ReadAll(io.NewSectionReader(f, off, size-off))
	if err != nil {
		return nil, err
	}
	if off > 0 {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return data, nil
}
