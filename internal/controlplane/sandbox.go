package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/admission"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/store"
)

// Kill reasons recorded in the store.
const (
	reasonLost    = "lost across restart"
	reasonTimeout = "timeout"
	reasonRequest = "killed by request"
	reasonGone    = "backend no longer runs the sandbox"
)

// sandbox is the in-memory state of a running or paused sandbox.
type sandbox struct {
	id      string
	op      sync.Mutex // serialises lifecycle operations on this sandbox
	metrics *ring

	// Set at creation.
	team            string            // owner (store.Sandbox.Team)
	ticket          *admission.Ticket // released when the sandbox is gone
	onTimeout       string            // "kill" or "pause"
	autoPauseMemory bool              // keep memory when paused at the deadline

	// Guarded by Service.mu.
	gone      bool // killed or lost; no longer in Service.live
	route     Route
	endAt     time.Time
	pauseMode backend.PauseMode // "" while running
	timer     *time.Timer
}

// newSandbox builds the in-memory state of record r as the backend reports
// it; ticket is its admission (released by forget).
func newSandbox(r store.Sandbox, in backend.Instance, ticket *admission.Ticket, ringSize int) *sandbox {
	sb := &sandbox{
		id:      r.ID,
		team:    recordTeam(r),
		ticket:  ticket,
		metrics: newRing(ringSize),
		route: Route{Addr: in.Addr, HostIface: in.HostIface, Running: !in.Paused, AutoResume: r.Lifecycle.AutoResume,
			AccessToken: r.AccessToken, TrafficToken: publicPortsToken(r), InterpreterToken: r.TrafficToken},
		endAt:           r.EndAt,
		onTimeout:       r.Lifecycle.OnTimeout,
		autoPauseMemory: r.Lifecycle.AutoPauseMemory,
	}
	sb.route.MaskRequestHost, sb.route.HTTPSPorts = ingressOf(r.Network)
	if in.Paused {
		sb.pauseMode = in.PauseMode
		if sb.pauseMode == "" {
			sb.pauseMode = backend.PauseMemory
		}
	}
	return sb
}

// publicPortsToken is the token the gateway requires on the ports of r but
// envd's: its traffic token when created with allowPublicTraffic false, else
// none (a secured sandbox's traffic token then serves its code interpreter only).
func publicPortsToken(r store.Sandbox) string {
	if !r.PrivateTraffic {
		return ""
	}
	return r.TrafficToken
}

// running reports whether the sandbox is live and not paused.
func (sb *sandbox) running() bool { return !sb.gone && sb.route.Running }

// register adds sb to the live table and arms its TTL when it is running.
func (s *Service) register(sb *sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live[sb.id] = sb
	if sb.route.Running {
		s.armLocked(sb)
	}
}

// pauseModeOf returns the pause mode of a live paused sandbox, "" otherwise.
func (s *Service) pauseModeOf(id string) backend.PauseMode {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sb, ok := s.live[id]; ok && !sb.route.Running {
		return sb.pauseMode
	}
	return ""
}

// lookup returns the live sandbox with this ID or nil.
func (s *Service) lookup(id string) *sandbox {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.live[id]
}

// acquire returns the live sandbox with id locked for a lifecycle operation of
// caller (a team, or serverCaller), or a 404 error, also when the sandbox
// belongs to another team. The caller must unlock sb.op.
func (s *Service) acquire(id, caller string) (*sandbox, error) {
	sb := s.find(id)
	if sb == nil || !owns(sb.team, caller) {
		return nil, sandboxNotFound(id)
	}
	sb.op.Lock()
	s.mu.RLock()
	gone := sb.gone
	s.mu.RUnlock()
	if gone {
		sb.op.Unlock()
		return nil, sandboxNotFound(id)
	}
	return sb, nil
}

// forget removes sb from the live table, stops its timer and releases its
// admission.
func (s *Service) forget(sb *sandbox) {
	sb.ticket.Release()
	s.mu.Lock()
	defer s.mu.Unlock()
	sb.gone = true
	if sb.timer != nil {
		sb.timer.Stop()
		sb.timer = nil
	}
	if s.live[sb.id] == sb {
		delete(s.live, sb.id)
	}
}

func (s *Service) notifyKill(id string) {
	if s.onKill != nil {
		s.onKill(id)
	}
}

// kill kills a live sandbox (running or paused) of caller. Unknown or killed
// IDs, and other teams' sandboxes, give 404.
func (s *Service) kill(ctx context.Context, id, caller, reason string) error {
	sb, err := s.acquire(id, caller)
	if err != nil {
		return err
	}
	defer sb.op.Unlock()
	return s.killLocked(ctx, sb, reason)
}

// killLocked kills sb; the caller holds sb.op. When the store already holds
// it killed (another replica won a race to kill it) the answer is 404, as a
// second kill gets from one server.
//
// The sandbox leaves the routing table and its connections are cut before the
// backend stops it: in-flight streams then fail with a reset (not a clean EOF from a
// dying agent) and the SDK's /health probe gets 502 at once, which is how the SDKs
// recognise a killed sandbox (docs/wire/envd.md §3.5). A backend failure is reported, but the
// sandbox stays killed; whatever the backend left behind is swept at the next start.
//
// Once begun, a kill runs to completion even when ctx is cancelled (a client that
// disconnects from DELETE mid-request): the sandbox has already left the routing
// table, so stopping halfway would only strand its processes, mounts and network
// until the next start.
func (s *Service) killLocked(ctx context.Context, sb *sandbox, reason string) error {
	ctx = context.WithoutCancel(ctx)
	s.forget(sb)
	s.metrics.SandboxKilled(killLabel(reason))
	s.notifyKill(sb.id)
	// Recorded before the backend works, so getInfo and lists agree with the gateway at
	// once; a crash in between is harmless (Recover sweeps what the store no longer knows).
	// An expiry was recorded by expireLocked.
	var lost error
	if reason != reasonTimeout {
		err := s.store.MarkKilled(ctx, sb.id, time.Now(), reason)
		if errors.Is(err, store.ErrNotFound) {
			lost = sandboxNotFound(sb.id)
		} else if err != nil {
			s.log.Error("record kill", "sandbox", sb.id, "err", err)
		}
	}
	err := s.backend.Kill(ctx, sb.id)
	s.dropKilledSecrets(ctx)
	if lost != nil {
		return lost
	}
	if err != nil {
		s.log.Error("backend cleanup of killed sandbox failed; swept at next start", "sandbox", sb.id, "err", err)
		return fmt.Errorf("kill sandbox %s: %w", sb.id, err)
	}
	s.log.Info("sandbox killed", "sandbox", sb.id, "reason", reason)
	return nil
}

// dropKilledSecrets empties the store's WAL after a kill, so the secrets
// MarkKilled dropped from the record leave the disk too (store.TruncateWAL).
// When a reader keeps the WAL busy they go at a later kill.
func (s *Service) dropKilledSecrets(ctx context.Context) {
	if err := s.store.TruncateWAL(ctx); err != nil {
		s.log.Debug("truncate the store's WAL after a kill", "err", err)
	}
}

// loseLocked records that the backend no longer runs sb; the caller holds sb.op.
func (s *Service) loseLocked(ctx context.Context, sb *sandbox) {
	s.forget(sb)
	s.metrics.SandboxKilled(killLabelGone)
	if err := s.store.MarkKilled(ctx, sb.id, time.Now(), s.goneReason(ctx, sb.id)); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("record lost sandbox", "sandbox", sb.id, "err", err)
	}
	s.dropKilledSecrets(ctx)
	s.notifyKill(sb.id)
	s.log.Warn("sandbox vanished from the backend", "sandbox", sb.id)
}

// lifecycleTimeout bounds one pause or resume in the backend.
const lifecycleTimeout = 2 * time.Minute

// detach returns a context for backend lifecycle work that a client going away
// does not cancel halfway (a half-done pause or resume only costs an undo).
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), lifecycleTimeout)
}

// pause pauses a running sandbox of caller (keepMemory: E2B's pause body
// `memory`, default true): 409 when already paused, 404 when unknown, killed or
// another team's, an error wrapping backend.ErrNotSupported when the backend
// cannot pause. The TTL stops while the sandbox is paused (E2B semantics:
// paused sandboxes do not time out).
func (s *Service) pause(ctx context.Context, id, caller string, keepMemory bool) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	sb, err := s.acquire(id, caller)
	if err != nil {
		return err
	}
	defer sb.op.Unlock()
	return s.pauseLocked(ctx, sb, keepMemory)
}

func alreadyPaused(id string) error {
	return &httpError{status: 409, msg: fmt.Sprintf("sandbox '%s' is already paused", id)}
}

// pauseLocked pauses sb; the caller holds sb.op. On a backend failure the sandbox
// normally keeps running and its TTL stays armed; if the backend reports it paused
// after all (it could not bring it back), it is recorded paused.
func (s *Service) pauseLocked(ctx context.Context, sb *sandbox, keepMemory bool) error {
	s.mu.RLock()
	running := sb.running()
	s.mu.RUnlock()
	if !running {
		return alreadyPaused(sb.id)
	}
	mode, err := s.backend.Pause(ctx, sb.id, backend.PauseOptions{KeepMemory: keepMemory})
	if errors.Is(err, backend.ErrNotFound) {
		s.loseLocked(ctx, sb)
		return sandboxNotFound(sb.id)
	}
	if err != nil {
		if in, lerr := s.backend.Lookup(ctx, sb.id); lerr == nil && in.Paused {
			if rerr := s.recordPausedLocked(ctx, sb, in.PauseMode); rerr != nil {
				s.log.Error("record paused state after a failed pause", "sandbox", sb.id, "err", rerr)
			}
		}
		if errors.Is(err, backend.ErrPaused) {
			return alreadyPaused(sb.id)
		}
		return fmt.Errorf("pause sandbox %s: %w", sb.id, err)
	}
	if err := s.recordPausedLocked(ctx, sb, mode); err != nil {
		return err
	}
	s.log.Info("sandbox paused", "sandbox", sb.id, "mode", mode)
	return nil
}

// recordPausedLocked routes sb as paused (the sandbox side answers 502), stops
// its TTL, records the pause and then cuts its open connections.
func (s *Service) recordPausedLocked(ctx context.Context, sb *sandbox, mode backend.PauseMode) error {
	s.mu.Lock()
	sb.route.Running, sb.pauseMode = false, mode
	if sb.timer != nil {
		sb.timer.Stop()
		sb.timer = nil
	}
	s.mu.Unlock()
	err := s.store.MarkPaused(ctx, sb.id)
	s.notifyKill(sb.id)
	if err != nil {
		return fmt.Errorf("record pause of %s: %w", sb.id, err)
	}
	return nil
}

// connect extends a running sandbox's deadline to now+ttl when that is later
// (resumed=false), or resumes a paused one with deadline now+ttl (resumed=true).
// Sandboxes of teams other than caller's give 404.
func (s *Service) connect(ctx context.Context, id, caller string, ttl time.Duration) (resumed bool, err error) {
	ctx, cancel := detach(ctx)
	defer cancel()
	sb, err := s.acquire(id, caller)
	if err != nil {
		return false, err
	}
	defer sb.op.Unlock()
	s.mu.RLock()
	running, endAt := sb.running(), sb.endAt
	s.mu.RUnlock()
	deadline := time.Now().Add(ttl)
	if running {
		if deadline.After(endAt) {
			return false, s.setDeadlineLocked(ctx, sb, deadline)
		}
		return false, nil
	}
	return true, s.resumeLocked(ctx, sb, deadline)
}

// resumeLocked brings a paused sandbox back with a new deadline; the caller holds
// sb.op. On a backend failure the sandbox stays paused.
func (s *Service) resumeLocked(ctx context.Context, sb *sandbox, deadline time.Time) error {
	in, err := s.backend.Resume(ctx, sb.id)
	if err != nil {
		if errors.Is(err, backend.ErrNotFound) {
			s.loseLocked(ctx, sb)
			return sandboxNotFound(sb.id)
		}
		if !errors.Is(err, backend.ErrNotPaused) {
			return fmt.Errorf("resume sandbox %s: %w", sb.id, err)
		}
		// Running already (e.g. the backend re-adopted it running): just route it.
		if in, err = s.backend.Lookup(ctx, sb.id); err != nil {
			return fmt.Errorf("resume sandbox %s: %w", sb.id, err)
		}
	}
	s.mu.RLock()
	addr, iface := sb.route.Addr, sb.route.HostIface
	s.mu.RUnlock()
	if in.Addr.IsValid() {
		addr, iface = in.Addr, in.HostIface
	}
	if err := s.store.MarkResumed(ctx, sb.id, addr, deadline); err != nil {
		return fmt.Errorf("record resume of %s: %w", sb.id, err)
	}
	s.mu.Lock()
	sb.route.Running, sb.route.Addr, sb.route.HostIface, sb.endAt, sb.pauseMode = true, addr, iface, deadline, ""
	s.armLocked(sb)
	s.mu.Unlock()
	s.log.Info("sandbox resumed", "sandbox", sb.id)
	return nil
}

// Wake resumes a paused sandbox whose lifecycle has autoResume, for the gateway
// (traffic to a paused sandbox resumes it): the deadline becomes now + 300 s when
// that is later (as connect). It returns the sandbox's route afterwards; ok is
// false for unknown, killed, or paused sandboxes without autoResume. A running
// sandbox is returned as is. err reports a failed resume (the sandbox stays paused).
func (s *Service) Wake(ctx context.Context, id string) (route Route, ok bool, err error) {
	r, found := s.Route(id)
	if !found || (!r.Running && !r.AutoResume) {
		return Route{}, false, nil
	}
	if !r.Running {
		if _, err := s.connect(ctx, id, serverCaller, defaultConnectTimeout); err != nil {
			var he *httpError
			if errors.As(err, &he) && he.status == 404 {
				return Route{}, false, nil
			}
			return Route{}, false, err
		}
	}
	r, found = s.Route(id)
	return r, found && r.Running, nil
}

// setTimeout replaces a running sandbox's deadline with now+ttl (it may shorten
// it). Paused, killed, unknown and other teams' sandboxes give 404.
func (s *Service) setTimeout(ctx context.Context, id, caller string, ttl time.Duration) error {
	sb, err := s.acquire(id, caller)
	if err != nil {
		return err
	}
	defer sb.op.Unlock()
	s.mu.RLock()
	running := sb.running()
	s.mu.RUnlock()
	if !running {
		return &httpError{status: 404, msg: fmt.Sprintf("sandbox '%s' is paused", id)}
	}
	return s.setDeadlineLocked(ctx, sb, time.Now().Add(ttl))
}

// setDeadlineLocked stores and arms a new deadline; the caller holds sb.op.
func (s *Service) setDeadlineLocked(ctx context.Context, sb *sandbox, deadline time.Time) error {
	if err := s.store.SetEndAt(ctx, sb.id, deadline); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return sandboxNotFound(sb.id) // killed meanwhile by another replica
		}
		return fmt.Errorf("set deadline of %s: %w", sb.id, err)
	}
	if s.shared != nil {
		if err := s.shared.SetDeadline(ctx, sb.id, deadline); err != nil {
			s.log.Warn("publish deadline; the leader takes it from the store", "sandbox", sb.id, "err", err)
		}
	}
	s.mu.Lock()
	sb.endAt = deadline
	s.armLocked(sb)
	s.mu.Unlock()
	return nil
}

func sandboxNotFound(id string) error {
	return &httpError{status: 404, msg: fmt.Sprintf("sandbox '%s' not found", id)}
}
