package controlplane

import (
	"context"
	"errors"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/store"
)

// sharedBackend is implemented by a backend that several control planes use
// at once (the kubernetes backend): what runs belongs to the cluster, and
// every replica serves every sandbox. The control plane then adopts sandboxes
// other replicas created (from events, or lazily on first use), records
// sandboxes the cluster lost, and arms TTLs only while it leads (Lead).
type sharedBackend interface {
	// Subscribe makes the backend call fn for every change to a sandbox it
	// observes, whichever replica caused it, from one goroutine, until it is
	// closed. fn must not block.
	Subscribe(fn func(backend.Event))
	// SetDeadline records a sandbox's new deadline where other replicas see it.
	SetDeadline(ctx context.Context, id string, deadline time.Time) error
}

// rekeyer is implemented by a backend whose sandboxes may run agents an
// older release initialised with the clients' access token itself (the
// kubernetes backend: Pods of the previous release's replicas during a
// rolling upgrade). Rekey gives such an agent its link credential once,
// authenticated with accessToken (the sandbox record's), and does nothing
// (false, nil) for a sandbox whose agent already has it, without sending
// accessToken.
type rekeyer interface {
	Rekey(ctx context.Context, id, accessToken string) (bool, error)
}

// tokenStats is implemented by backends that sample a sandbox through its
// agent, which wants the sandbox's access token ("" for unsecured ones).
type tokenStats interface {
	StatsWithToken(ctx context.Context, id, token string) (backend.Stats, error)
}

// pauser is implemented by backends that say whether they can pause at all; a
// backend without it is assumed to (and answers ErrNotSupported per request).
type pauser interface {
	CanPause() bool
}

// volumeHolder is implemented by backends that say whether they hold volumes
// at all; a backend without it is assumed to.
type volumeHolder interface {
	CanHoldVolumes() bool
}

// Bounds of the shared-backend bookkeeping.
const (
	// syncInterval is how often the leader reconciles the store with the
	// backend (sandboxes lost while no replica watched, deadlines changed
	// where no event reached it).
	syncInterval = 30 * time.Second
	// adoptTimeout bounds reading one sandbox's record to adopt it.
	adoptTimeout = 10 * time.Second
)

// known returns the live sandbox id, or nil and whether a create of it is in
// flight here.
func (s *Service) known(id string) (sb *sandbox, creating bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, creating = s.creating[id]
	return s.live[id], creating
}

// registerNew registers record r as the backend reports it and returns it,
// unless the sandbox is live here already (that one is returned) or being
// created here (nil).
func (s *Service) registerNew(r store.Sandbox, in backend.Instance) *sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.live[r.ID]; sb != nil {
		return sb
	}
	if _, busy := s.creating[r.ID]; busy {
		return nil
	}
	sb := newSandbox(r, in, s.admit.Hold(recordTeam(r), r.MemoryMB), s.ringSize)
	s.live[sb.id] = sb
	if sb.route.Running {
		s.armLocked(sb)
	}
	return sb
}

// refreshDeadline takes a deadline another replica set (sb may be nil).
func (s *Service) refreshDeadline(sb *sandbox, endAt time.Time) {
	if sb == nil || endAt.IsZero() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.gone || sb.endAt.Equal(endAt) {
		return
	}
	sb.endAt = endAt
	s.armLocked(sb)
}

// setCreating marks (on) or unmarks a create of id in flight here.
func (s *Service) setCreating(id string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.creating[id] = struct{}{}
	} else {
		delete(s.creating, id)
	}
}

// goneReason is the kill reason of a sandbox the backend no longer runs,
// with the backend's explanation when it has one.
func (s *Service) goneReason(ctx context.Context, id string) string {
	var gone *backend.GoneError
	if _, err := s.backend.Lookup(ctx, id); errors.As(err, &gone) && gone.Reason != "" {
		return reasonGone + ": " + gone.Reason
	}
	return reasonGone
}

// find returns the live sandbox id; with a shared backend a sandbox another
// replica runs is adopted on first use. nil when unknown.
func (s *Service) find(id string) *sandbox {
	sb, creating := s.known(id)
	if sb != nil || s.shared == nil || creating {
		return sb
	}
	ctx, cancel := context.WithTimeout(s.bg, adoptTimeout)
	defer cancel()
	return s.adoptShared(ctx, id)
}

// adoptShared registers sandbox id, which the backend runs for another
// replica, from its store record; nil when the backend does not run it or the
// store has no live record of it (yet).
func (s *Service) adoptShared(ctx context.Context, id string) *sandbox {
	in, err := s.backend.Lookup(ctx, id)
	if err != nil {
		return nil
	}
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil || rec.State == store.StateKilled {
		return nil
	}
	return s.registerNew(rec, in)
}

// onEvent applies a shared backend's event; slow work runs in the background.
func (s *Service) onEvent(ev backend.Event) {
	switch ev.Kind {
	case backend.EventUp:
		if sb, creating := s.known(ev.SandboxID); sb != nil || creating {
			return
		}
		s.background(func(ctx context.Context) { s.adoptShared(ctx, ev.SandboxID) })
	case backend.EventDeadline:
		sb, _ := s.known(ev.SandboxID)
		s.refreshDeadline(sb, ev.Deadline)
	case backend.EventGone:
		s.background(func(ctx context.Context) { s.goneShared(ctx, ev.SandboxID, ev.Reason) })
	}
}

// background runs f with a bounded context unless the service is shut down.
func (s *Service) background(f func(ctx context.Context)) {
	if !s.enter() {
		return
	}
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.bg, adoptTimeout)
		defer cancel()
		f(ctx)
	}()
}

// goneShared records that the cluster no longer runs sandbox id (evicted, its
// node lost, deleted by another replica's kill): the first replica to record
// it wins, the others find it killed; every replica drops its route.
func (s *Service) goneShared(ctx context.Context, id, why string) {
	reason := reasonGone
	if why != "" {
		reason += ": " + why
	}
	sb, _ := s.known(id)
	if sb != nil {
		sb.op.Lock()
		defer sb.op.Unlock()
	}
	err := s.store.MarkKilled(ctx, id, time.Now(), reason)
	switch {
	case err == nil:
		s.metrics.SandboxKilled(killLabelGone)
		s.dropKilledSecrets(ctx)
		s.log.Warn("sandbox gone from the cluster", "sandbox", id, "reason", reason)
	case !errors.Is(err, store.ErrNotFound):
		s.log.Error("record gone sandbox", "sandbox", id, "err", err)
	}
	if sb != nil {
		s.forget(sb)
		s.notifyKill(id)
	}
}

// Lead runs the duties of the one leading replica until ctx ends: it arms the
// TTL of every sandbox (expiring those past their deadline), refills the warm
// pool (WarmPool.Run) and reconciles the store with the backend every
// syncInterval (which re-keys agents an older release initialised: rekey). It is for shared backends (the leader is elected by the
// caller, e.g. on a Kubernetes Lease); on one server Start does all of this.
func (s *Service) Lead(ctx context.Context) {
	s.setLeading(true)
	defer s.setLeading(false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if s.pool != nil {
			s.pool.Run(ctx)
		}
	}()
	t := time.NewTicker(syncInterval)
	defer t.Stop()
	for {
		if err := s.recover(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("reconcile with the backend", "err", err)
		}
		select {
		case <-ctx.Done():
			<-done
			return
		case <-t.C:
		}
	}
}

// setLeading arms (on) or stops every TTL timer.
func (s *Service) setLeading(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leading = on
	for _, sb := range s.live {
		if on {
			s.armLocked(sb)
		} else if sb.timer != nil {
			sb.timer.Stop()
			sb.timer = nil
		}
	}
	s.log.Info("leadership", "leading", on)
}
