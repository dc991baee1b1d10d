package controlplane

import (
	"context"
	"errors"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/store"
)

// expireTimeout bounds the backend work of one TTL expiry.
const expireTimeout = time.Minute

// armLocked (re)starts sb's TTL timer for sb.endAt; the caller holds s.mu for
// writing. A timer fires at the deadline, so a sandbox is handled well within a
// second of it (docs/wire/e2b-api.md §2.3).
func (s *Service) armLocked(sb *sandbox) {
	if sb.timer != nil {
		sb.timer.Stop()
		sb.timer = nil
	}
	if s.closed || sb.gone || !sb.route.Running || !s.leading {
		return
	}
	sb.timer = time.AfterFunc(max(time.Until(sb.endAt), 0), func() { s.expire(sb) })
}

// expire kills sb (or pauses it when its lifecycle says onTimeout=pause and the
// backend supports pausing; see pauseAtDeadline) if it is still running and past
// its deadline.
func (s *Service) expire(sb *sandbox) {
	if !s.enter() {
		return
	}
	defer s.wg.Done()
	sb.op.Lock()
	defer sb.op.Unlock()
	s.mu.RLock()
	due := s.leading && sb.running() && !time.Now().Before(sb.endAt)
	s.mu.RUnlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.bg), expireTimeout)
	defer cancel()
	if sb.onTimeout == "pause" {
		if s.pauseAtDeadline(ctx, sb) {
			return
		}
		s.mu.RLock()
		gone := sb.gone
		s.mu.RUnlock()
		if gone {
			return
		}
	}
	if err := s.expireLocked(ctx, sb); err != nil {
		s.log.Error("kill at deadline failed", "sandbox", sb.id, "err", err)
		s.retryLater(sb)
	}
}

// expireLocked kills sb at its deadline; the caller holds sb.op. The store
// decides (MarkExpired): when another replica moved the deadline meanwhile,
// the sandbox runs on with the stored one; when one killed it, it is only
// dropped from the routing table here.
func (s *Service) expireLocked(ctx context.Context, sb *sandbox) error {
	err := s.store.MarkExpired(ctx, sb.id, time.Now(), reasonTimeout)
	switch {
	case errors.Is(err, store.ErrConflict):
		rec, gerr := s.store.GetSandbox(ctx, sb.id)
		if gerr != nil {
			return gerr
		}
		s.refreshDeadline(sb, rec.EndAt)
		return nil
	case errors.Is(err, store.ErrNotFound):
		s.forget(sb)
		s.notifyKill(sb.id)
		return nil
	case err != nil:
		return err
	}
	return s.killLocked(ctx, sb, reasonTimeout)
}

// pauseAtDeadline pauses sb for lifecycle onTimeout=pause and reports whether the
// expiry is handled: paused, or a failed pause re-armed to retry (an automatic
// pause never turns into a kill that would lose the sandbox's files). A pause that
// keeps memory and fails falls back to a filesystem pause. false means the backend
// cannot pause at all, so the sandbox is killed as usual.
func (s *Service) pauseAtDeadline(ctx context.Context, sb *sandbox) bool {
	err := s.pauseLocked(ctx, sb, sb.autoPauseMemory)
	s.mu.RLock()
	running := sb.running()
	s.mu.RUnlock()
	if err != nil && !running {
		return true // the failed pause left it paused (or it was killed meanwhile)
	}
	if err != nil && sb.autoPauseMemory && !errors.Is(err, backend.ErrNotSupported) {
		s.log.Error("pause at deadline failed; trying a filesystem pause", "sandbox", sb.id, "err", err)
		err = s.pauseLocked(ctx, sb, false)
	}
	switch {
	case err == nil:
		return true
	case errors.Is(err, backend.ErrNotSupported):
		return false
	}
	s.mu.RLock()
	gone := sb.gone
	s.mu.RUnlock()
	if !gone {
		s.log.Error("pause at deadline failed; retrying", "sandbox", sb.id, "err", err)
		s.retryLater(sb)
	}
	return true
}

// retryLater re-arms a failed expiry a second from now.
func (s *Service) retryLater(sb *sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || sb.gone {
		return
	}
	sb.timer = time.AfterFunc(time.Second, func() { s.expire(sb) })
}
