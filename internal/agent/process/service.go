// Package process implements envd's Process service inside a sandbox
// (docs/wire/envd.md): it starts commands (with pipes or a PTY) as the requesting user,
// streams their output to any number of attached clients, and accepts input,
// signals and PTY resizes addressed by pid or tag.
//
// Lifetime rules: the Connect-Timeout-Ms deadline of a Start request bounds the
// process's life (the process group is killed when it passes); a client that
// merely disconnects leaves the process running, and Connect re-attaches to it.
// Finished processes are remembered for a while so a late Connect still gets
// their end event. Output fan-out and its drop policy: see DefaultSubscriberBacklog.
package process

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agent/users"
	pb "github.com/cubby-dev/cubby/internal/envdpb/process"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
)

// Retention of finished processes for Connect (docs/wire/envd.md, "Connect").
const (
	// FinishedKeep is how many finished processes are remembered.
	FinishedKeep = 100
	// FinishedTTL is how long a finished process is remembered.
	FinishedTTL = 5 * time.Minute
)

// DefaultKeepalive is the keepalive interval of streams whose request carries
// no valid Keepalive-Ping-Interval header (docs/wire/envd.md).
const DefaultKeepalive = 90 * time.Second

// KeepaliveHeader names the request header giving the stream keepalive interval
// in whole seconds (docs/wire/envd.md).
const KeepaliveHeader = "Keepalive-Ping-Interval"

var _ processconnect.ProcessHandler = (*Service)(nil)

// Service implements processconnect.ProcessHandler. It is safe for concurrent
// use; create it with NewService and stop it with Close.
type Service struct {
	settings *settings.Settings
	log      *slog.Logger
	backlog  int // per-subscriber output backlog in bytes

	mu       sync.Mutex
	closed   bool
	running  map[uint32]*proc
	finished []*proc        // oldest first
	procs    sync.WaitGroup // one per process being started or supervised
}

// NewService returns a Process service that runs commands with the defaults of
// s (user, workdir, sandbox env vars, read at each Start) and logs to log.
func NewService(s *settings.Settings, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{
		settings: s,
		log:      log,
		backlog:  DefaultSubscriberBacklog,
		running:  map[uint32]*proc{},
	}
}

// Close rejects further Starts with `unavailable`, SIGKILLs the process group of
// every running process this service started and waits until each is reaped
// and its end event published.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	procs := slices.Collect(maps.Values(s.running))
	s.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
	s.procs.Wait()
}

// reserve accounts for a process about to start; false once closed.
func (s *Service) reserve() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.procs.Add(1)
	return true
}

// register tracks a started process; it reports whether the service was closed
// meanwhile (the caller then kills it).
func (s *Service) register(p *proc) (closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[p.pid] = p
	return s.closed
}

// retire moves p from the running set to the finished list.
func (s *Service) retire(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[p.pid] == p {
		delete(s.running, p.pid)
	}
	p.endedAt = time.Now()
	s.finished = append(s.finished, p)
	s.pruneLocked()
}

func (s *Service) pruneLocked() {
	cut := max(0, len(s.finished)-FinishedKeep)
	for cut < len(s.finished) && time.Since(s.finished[cut].endedAt) > FinishedTTL {
		cut++
	}
	s.finished = slices.Delete(s.finished, 0, cut)
}

// lookup finds a running process, or with withFinished also a recently finished
// one, by selector. Unknown → `not_found` "process with pid N not found".
func (s *Service) lookup(sel *pb.ProcessSelector, withFinished bool) (*proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked()
	match := func(p *proc) bool { return p.pid == sel.GetPid() }
	what := fmt.Sprintf("pid %d", sel.GetPid())
	switch sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p := s.running[sel.GetPid()]; p != nil {
			return p, nil
		}
	case *pb.ProcessSelector_Tag:
		match = func(p *proc) bool { return p.tag != nil && *p.tag == sel.GetTag() }
		what = fmt.Sprintf("tag %s", sel.GetTag())
		for _, pid := range slices.Backward(slices.Sorted(maps.Keys(s.running))) {
			if p := s.running[pid]; match(p) {
				return p, nil
			}
		}
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector needs a pid or a tag"))
	}
	if withFinished {
		for _, p := range slices.Backward(s.finished) {
			if match(p) {
				return p, nil
			}
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s not found", what))
}

// resolveUser picks the user from the Basic authorization header, else the
// sandbox default. Unknown → `unauthenticated` "invalid username: '<u>'".
func (s *Service) resolveUser(h http.Header) (*users.User, error) {
	return users.ForRPC(h, s.settings.User())
}

// keepaliveInterval reads KeepaliveHeader (seconds), else DefaultKeepalive.
func keepaliveInterval(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get(KeepaliveHeader))
	if err != nil || n <= 0 {
		return DefaultKeepalive
	}
	return time.Duration(n) * time.Second
}
