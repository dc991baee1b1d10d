// Package image pulls OCI and Docker images from registries and keeps
// content-addressed blobs (layers, configs, manifests) in an OCI image layout
// on disk (image-spec image-layout.md): every blob is stored once under its
// sha256 digest, written atomically and verified, so templates built from
// images and their build steps can be shipped to another host by digest.
package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/atomicfile"
)

// ErrBlobNotFound is wrapped by Store reads of a digest the store lacks.
var ErrBlobNotFound = errors.New("blob not found")

// Store is an OCI image layout rooted at a directory:
//
//	<dir>/oci-layout            {"imageLayoutVersion":"1.0.0"}
//	<dir>/index.json            image index of the named manifests (UpdateIndex)
//	<dir>/blobs/sha256/<hex>    content, immutable once written
//	<dir>/blobs/.tmp-*          blobs being written (removed on failure)
//
// A Store is safe for concurrent use, also by several processes sharing dir.
type Store struct {
	dir string
}

// OpenStore opens the OCI layout at dir. Nothing is written until the first
// blob or index change, which creates the layout.
func OpenStore(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open image store: no directory")
	}
	return &Store{dir: dir}, nil
}

// ensure creates the layout's directories and oci-layout file.
func (s *Store) ensure() error {
	if err := os.MkdirAll(filepath.Join(s.dir, "blobs", "sha256"), 0o755); err != nil {
		return fmt.Errorf("image store: %w", err)
	}
	layout := filepath.Join(s.dir, "oci-layout")
	if _, err := os.Stat(layout); errors.Is(err, fs.ErrNotExist) {
		if err := atomicfile.Write(layout, []byte(`{"imageLayoutVersion":"1.0.0"}`+"\n"), 0o644); err != nil {
			return fmt.Errorf("image store: %w", err)
		}
	}
	return nil
}

// Dir is the layout's root directory.
func (s *Store) Dir() string { return s.dir }

// BlobPath is where blob d is (or would be) stored.
func (s *Store) BlobPath(d v1.Hash) string {
	return filepath.Join(s.dir, "blobs", d.Algorithm, d.Hex)
}

// Has reports whether blob d is stored.
func (s *Store) Has(d v1.Hash) bool {
	if d.Algorithm != "sha256" || len(d.Hex) != 64 {
		return false
	}
	_, err := os.Stat(s.BlobPath(d))
	return err == nil
}

// Open opens blob d for reading. Errors wrap ErrBlobNotFound.
func (s *Store) Open(d v1.Hash) (*os.File, error) {
	if d.Algorithm != "sha256" || len(d.Hex) != 64 {
		return nil, fmt.Errorf("blob %s: unsupported digest: %w", d, ErrBlobNotFound)
	}
	f, err := os.Open(s.BlobPath(d))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %s: %w", d, ErrBlobNotFound)
	}
	return f, err
}

// Write stores the content of r and returns its digest and size. When want
// is not the zero Hash the content must hash to it, else nothing is stored
// and an error is returned; an already stored want is not read again (r is
// then drained only by the caller, if at all).
func (s *Store) Write(ctx context.Context, r io.Reader, want v1.Hash) (v1.Hash, int64, error) {
	if want != (v1.Hash{}) && s.Has(want) {
		st, err := os.Stat(s.BlobPath(want))
		if err != nil {
			return v1.Hash{}, 0, err
		}
		return want, st.Size(), nil
	}
	return s.write(ctx, func(w io.Writer) error {
		_, err := io.Copy(w, ctxReader{ctx, r})
		return err
	}, want)
}

// write runs fill against a temporary blob file, then moves it under its
// digest (checking want when given).
func (s *Store) write(ctx context.Context, fill func(io.Writer) error, want v1.Hash) (v1.Hash, int64, error) {
	if err := s.ensure(); err != nil {
		return v1.Hash{}, 0, err
	}
	tmp, err := os.CreateTemp(filepath.Join(s.dir, "blobs"), ".tmp-")
	if err != nil {
		return v1.Hash{}, 0, fmt.Errorf("write blob: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(tmp, h)}
	if err := fill(cw); err != nil {
		return v1.Hash{}, 0, err // the producer's own error
	}
	if err := ctx.Err(); err != nil {
		return v1.Hash{}, 0, fmt.Errorf("write blob: %w", err)
	}
	got := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	if want != (v1.Hash{}) && got != want {
		return v1.Hash{}, 0, fmt.Errorf("write blob: content has digest %s, want %s", got, want)
	}
	if err := tmp.Sync(); err != nil {
		return v1.Hash{}, 0, fmt.Errorf("write blob: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return v1.Hash{}, 0, fmt.Errorf("write blob: %w", err)
	}
	if err := os.Rename(tmp.Name(), s.BlobPath(got)); err != nil {
		return v1.Hash{}, 0, fmt.Errorf("write blob: %w", err)
	}
	return got, cw.n, nil
}

// WriteJSON stores v as JSON and returns its descriptor with mediaType.
func (s *Store) WriteJSON(ctx context.Context, v any, mediaType types.MediaType) (v1.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("encode %s: %w", mediaType, err)
	}
	sum := sha256.Sum256(data)
	want := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	if !s.Has(want) {
		if _, _, err := s.write(ctx, func(w io.Writer) error { _, err := w.Write(data); return err }, want); err != nil {
			return v1.Descriptor{}, err
		}
	}
	return v1.Descriptor{MediaType: mediaType, Digest: want, Size: int64(len(data))}, nil
}

// ReadJSON decodes blob d into v. Errors wrap ErrBlobNotFound for a missing blob.
func (s *Store) ReadJSON(d v1.Hash, v any) error {
	f, err := s.Open(d)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := json.NewDecoder(io.LimitReader(f, 16<<20)).Decode(v); err != nil {
		return fmt.Errorf("decode blob %s: %w", d, err)
	}
	return nil
}

// Blobs lists the digests of every stored blob.
func (s *Store) Blobs() ([]v1.Hash, error) {
	entries, err := os.ReadDir(filepath.Join(s.dir, "blobs", "sha256"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list blobs: %w", err)
	}
	out := make([]v1.Hash, 0, len(entries))
	for _, e := range entries {
		if len(e.Name()) == 64 {
			out = append(out, v1.Hash{Algorithm: "sha256", Hex: e.Name()})
		}
	}
	return out, nil
}

// Remove deletes blob d (a missing blob is not an error). Callers make sure
// nothing refers to it any more.
func (s *Store) Remove(d v1.Hash) error {
	if err := os.Remove(s.BlobPath(d)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove blob %s: %w", d, err)
	}
	return nil
}

// Index returns the layout's index.json (empty when there is none yet).
func (s *Store) Index() (*v1.IndexManifest, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, "index.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return &v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("decode index.json: %w", err)
	}
	return &idx, nil
}

// UpdateIndex runs change on index.json under an exclusive lock shared by
// every process using the layout, and replaces the file atomically when
// change returns nil. Waiting for the lock ends with ctx.
func (s *Store) UpdateIndex(ctx context.Context, change func(*v1.IndexManifest) error) error {
	if err := s.ensure(); err != nil {
		return err
	}
	unlock, err := lockFile(ctx, filepath.Join(s.dir, "index.lock"))
	if err != nil {
		return fmt.Errorf("update index: %w", err)
	}
	defer unlock()
	idx, err := s.Index()
	if err != nil {
		return err
	}
	if err := change(idx); err != nil {
		return err
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return fmt.Errorf("encode index.json: %w", err)
	}
	return atomicfile.Write(filepath.Join(s.dir, "index.json"), append(data, '\n'), 0o644)
}

// lockFile takes an exclusive flock on path, polling until ctx ends.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// ctxReader fails reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

// hashWriter hashes what passes through it.
type hashWriter struct {
	h hash.Hash
}

func (h hashWriter) Write(b []byte) (int, error) { return h.h.Write(b) }

func (h hashWriter) digest() v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.h.Sum(nil))}
}
