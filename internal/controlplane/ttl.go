package controlplane

import (
	"context"
	"errors"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
)

// expireTimeout bounds the backend work of one TTL expiry.
const expireTimeout = time.Minute

// armLocked (re)starts sb's TTL timer for sb.endAt; the caller holds s.mu for
// writing. A timer fires at the deadline, so a sandbox is handled well within a
// second of it (E2B wire §5 item 20).
func (s *Service) armLocked(sb *sandbox) {
	if sb.timer != nil {
		sb.timer.Stop()
		sb.timer = nil
	}
	if s.closed || sb.gone || !sb.route.Running {
		return
	}
	sb.timer = time.AfterFunc(max(time.Until(sb.endAt), 0), func() { s.expire(sb) })
}

// expire kills sb (or pauses it when its lifecycle says onTimeout=pause and the
// backend supports pausing) if it is still running and past its deadline.
func (s *Service) expire(sb *sandbox) {
	if !s.enter() {
		return
	}
	defer s.wg.Done()
	sb.op.Lock()
	defer sb.op.Unlock()
	s.mu.RLock()
	due := sb.running() && !time.Now().Before(sb.endAt)
	onTimeout := sb.onTimeout
	s.mu.RUnlock()
	if !due {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.bg), expireTimeout)
	defer cancel()
	if onTimeout == "pause" {
		err := s.pauseLocked(ctx, sb)
		if err == nil {
			return
		}
		if !errors.Is(err, backend.ErrNotSupported) {
			s.log.Error("pause at deadline failed; killing", "sandbox", sb.id, "err", err)
		}
		s.mu.RLock()
		gone := sb.gone
		s.mu.RUnlock()
		if gone {
			return
		}
	}
	if err := s.killLocked(ctx, sb, reasonTimeout); err != nil {
		s.log.Error("kill at deadline failed", "sandbox", sb.id, "err", err)
		s.retryLater(sb)
	}
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
