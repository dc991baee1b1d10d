// Package builds runs the template builds requested through the template
// build API (docs/templates.md): their records in the store, their log
// entries on disk, the file uploads of COPY steps, at most a few builds at
// once, and the clean-up after a restart (builds that were running are
// marked failed).
package builds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/template"
)

// Errors of the service, for callers mapping them to HTTP statuses.
var (
	ErrNotFound  = errors.New("template build not found")       // 404
	ErrStarted   = errors.New("template build already started") // 409
	ErrInvalid   = errors.New("invalid template build")         // 400
	ErrNameInUse = errors.New("name in use")                    // 409
	ErrTooLarge  = errors.New("upload too large")               // 413
	ErrShutdown  = errors.New("server is shutting down")        // 503
	errRestarted = "the server stopped while the build was running; start a new build"
	errCancelled = "the build was cancelled: the server is shutting down"
)

// Config configures a Service.
type Config struct {
	Store   *store.Store
	Manager *template.Manager
	Builder *template.Builder
	// Dir holds the uploads of COPY steps: uploads/<templateID>/<hash>.
	Dir string
	// MaxConcurrent is how many builds run at once (a build uses CPU and
	// disk heavily; later ones wait with status "waiting"). Required
	// (server.Config.BuildConcurrency).
	MaxConcurrent int
	// MaxUploadBytes bounds one COPY upload; default 10 GiB.
	MaxUploadBytes int64
	// DefaultCPU and DefaultMemoryMB apply when a request names none.
	// Required (the server's sandbox defaults).
	DefaultCPU, DefaultMemoryMB int
	// OnDone is called (may be nil) when a build ends: err is nil once it is
	// published.
	OnDone func(info template.Info, err error)
	Log    *slog.Logger
}

// Service runs template builds. Safe for concurrent use.
type Service struct {
	cfg   Config
	log   *slog.Logger
	slots chan struct{}

	mu     sync.Mutex
	jobs   map[string]*job // running and queued builds by build ID
	closed bool
	wg     sync.WaitGroup
}

// New returns a Service. Call Recover once before serving.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Manager == nil || cfg.Builder == nil || cfg.Dir == "" {
		return nil, errors.New("builds: store, manager, builder and dir are required")
	}
	if cfg.MaxConcurrent <= 0 || cfg.DefaultCPU <= 0 || cfg.DefaultMemoryMB <= 0 {
		return nil, errors.New("builds: MaxConcurrent, DefaultCPU and DefaultMemoryMB are required")
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 10 << 30
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "uploads"), 0o700); err != nil {
		return nil, fmt.Errorf("builds dir: %w", err)
	}
	return &Service{cfg: cfg, log: cfg.Log, slots: make(chan struct{}, cfg.MaxConcurrent), jobs: map[string]*job{}}, nil
}

// Recover marks builds that were waiting or running when the server stopped
// as failed (their sandboxes and staging trees are swept by the backend's
// and the template manager's own recovery) and drops stale uploads.
func (s *Service) Recover(ctx context.Context) error {
	n, err := s.cfg.Store.FailUnfinishedTemplateBuilds(ctx, errRestarted)
	if err != nil {
		return err
	}
	if n > 0 {
		s.log.Warn("template builds interrupted by a restart marked failed", "builds", n)
	}
	s.pruneUploads(7 * 24 * time.Hour)
	return nil
}

// Shutdown cancels running builds (they end with status error) and waits
// for them until ctx is done.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, j := range s.jobs {
		j.cancel()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("builds shutdown: %w", ctx.Err())
	}
}
