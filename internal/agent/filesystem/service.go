// Package filesystem implements envd's filesystem.Filesystem Connect service inside a
// sandbox (docs/wire/envd.md): Stat, MakeDir, Move, ListDir,
// Remove, the WatchDir stream and the polling watchers of the Python sync SDK.
//
// The agent runs as root; a request acts for the sandbox user named by its
// `Authorization: Basic` header (else the sandbox default user): relative paths
// resolve against that user's home and created entries belong to that user.
package filesystem

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"syscall"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agent/users"
	"github.com/cubby-dev/cubby/internal/envdpb/filesystem/filesystemconnect"
)

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// Service implements filesystemconnect.FilesystemHandler. It is safe for
// concurrent use; call Close to stop every watcher it started.
type Service struct {
	settings *settings.Settings
	log      *slog.Logger

	mu       sync.Mutex
	closed   bool
	pollers  map[string]*poller       // CreateWatcher id → watcher
	watchers map[*dirWatcher]struct{} // every live watcher, streams included
}

// NewService returns the Filesystem service for the sandbox configured by s.
// Mount it with filesystemconnect.NewFilesystemHandler.
func NewService(s *settings.Settings, log *slog.Logger) *Service {
	return &Service{
		settings: s,
		log:      log,
		pollers:  map[string]*poller{},
		watchers: map[*dirWatcher]struct{}{},
	}
}

// Close stops every watcher (WatchDir streams end with `unavailable`, polling
// watchers are forgotten) and makes later watch requests fail with `unavailable`.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	ws := make([]*dirWatcher, 0, len(s.watchers))
	for w := range s.watchers {
		ws = append(ws, w)
	}
	clear(s.watchers)
	clear(s.pollers)
	s.mu.Unlock()
	var errs []error
	for _, w := range ws {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

// user resolves the request's sandbox user: the Basic auth username, else the
// default user. An unknown user is `unauthenticated` "invalid username: '<u>'".
func (s *Service) user(h http.Header) (*users.User, error) {
	return users.ForRPC(h, s.settings.User())
}

// resolve returns the request's user and the absolute path p names for them.
func (s *Service) resolve(h http.Header, p string) (*users.User, string, error) {
	u, err := s.user(h)
	if err != nil {
		return nil, "", err
	}
	return u, u.Resolve(p, s.settings.Workdir()), nil
}

// fsError turns a filesystem error on path into a Connect error: missing →
// not_found, exists → already_exists, a non-directory component → invalid_argument,
// permission → permission_denied, anything else → internal (docs/wire/envd.md).
func fsError(op, path string, err error) error {
	var code connect.Code
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("path '%s' does not exist", path))
	case errors.Is(err, fs.ErrExist):
		code = connect.CodeAlreadyExists
	case errors.Is(err, syscall.ENOTDIR):
		code = connect.CodeInvalidArgument
	case errors.Is(err, fs.ErrPermission):
		code = connect.CodePermissionDenied
	default:
		code = connect.CodeInternal
	}
	return connect.NewError(code, fmt.Errorf("%s '%s': %w", op, path, err))
}
