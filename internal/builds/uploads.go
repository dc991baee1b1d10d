package builds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubby-dev/cubby/internal/template"
)

var (
	hashRe       = regexp.MustCompile(`^[0-9a-f]{64}$`)
	templateIDRe = regexp.MustCompile(`^[a-z2-7]{20}$`)
)

// uploadPath is where the files uploaded for hash in template id live; ""
// when id or hash are malformed.
func (s *Service) uploadPath(id, hash string) string {
	if !templateIDRe.MatchString(id) || !hashRe.MatchString(hash) {
		return ""
	}
	return filepath.Join(s.cfg.Dir, "uploads", id, hash)
}

// HasFiles reports whether the files of hash were uploaded for template id.
func (s *Service) HasFiles(id, hash string) bool {
	p := s.uploadPath(id, hash)
	if p == "" {
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}

// Upload stores the body of a COPY step's upload (a tar or tar.gz, checked
// when the step runs) for hash in template id, atomically. ctx is not
// consulted while copying: an HTTP request body fails on its own when the
// client goes away. Errors wrap
// ErrInvalid (malformed id or hash) or ErrTooLarge.
func (s *Service) Upload(ctx context.Context, id, hash string, body io.Reader) error {
	p := s.uploadPath(id, hash)
	if p == "" {
		return fmt.Errorf("%w: files hash must be 64 hex digits", ErrInvalid)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".upload-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(body, s.cfg.MaxUploadBytes+1))
	if err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	if n > s.cfg.MaxUploadBytes {
		return fmt.Errorf("%w: more than %d bytes", ErrTooLarge, s.cfg.MaxUploadBytes)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := os.WriteFile(p+".sha256", []byte(hex.EncodeToString(h.Sum(nil))), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p)
}

// files serves uploads to builds (template.Files).
func (s *Service) files() template.Files { return uploads{s} }

type uploads struct{ s *Service }

// Open implements template.Files.
func (u uploads) Open(id, hash string) (io.ReadSeekCloser, v1.Hash, error) {
	p := u.s.uploadPath(id, hash)
	if p == "" {
		return nil, v1.Hash{}, fmt.Errorf("files hash %q: %w", hash, template.ErrFilesMissing)
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, v1.Hash{}, fmt.Errorf("files hash %s: %w", hash, template.ErrFilesMissing)
	}
	if err != nil {
		return nil, v1.Hash{}, err
	}
	sum, err := os.ReadFile(p + ".sha256")
	if err != nil {
		f.Close()
		return nil, v1.Hash{}, err
	}
	return f, v1.Hash{Algorithm: "sha256", Hex: string(sum)}, nil
}

// pruneUploads removes uploads older than age.
func (s *Service) pruneUploads(age time.Duration) {
	root := filepath.Join(s.cfg.Dir, "uploads")
	cutoff := time.Now().Add(-age)
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil && fi.ModTime().Before(cutoff) {
			os.Remove(p)
		}
		return nil
	})
}
