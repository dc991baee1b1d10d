package controlplane

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/backend"
)

// statsTimeout bounds one backend.Stats call.
const statsTimeout = 5 * time.Second

// ring keeps the most recent samples of one sandbox.
type ring struct {
	mu   sync.Mutex
	buf  []backend.Stats
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]backend.Stats, n)} }

func (r *ring) add(st backend.Stats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf[r.next] = st
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// between returns the samples whose unix second lies in [start, end], oldest first.
func (r *ring) between(start, end int64) []backend.Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []backend.Stats
	if r.full {
		all = append(all, r.buf[r.next:]...)
	}
	all = append(all, r.buf[:r.next]...)
	out := []backend.Stats{}
	for _, st := range all {
		if ts := st.Timestamp.Unix(); ts >= start && ts <= end {
			out = append(out, st)
		}
	}
	return out
}

// sampleLoop samples every running sandbox each MetricsInterval until Shutdown.
func (s *Service) sampleLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.MetricsInterval)
	defer t.Stop()
	for {
		select {
		case <-s.bg.Done():
			return
		case <-t.C:
			s.sampleAll(s.bg)
		}
	}
}

func (s *Service) sampleAll(ctx context.Context) {
	s.mu.RLock()
	var targets []*sandbox
	for _, sb := range s.live {
		if sb.running() {
			targets = append(targets, sb)
		}
	}
	s.mu.RUnlock()
	for _, sb := range targets {
		if ctx.Err() != nil {
			return
		}
		s.sampleOne(ctx, sb)
	}
}

// sampleOne takes one backend.Stats sample of sb. A sandbox the backend no
// longer runs is recorded as killed.
func (s *Service) sampleOne(ctx context.Context, sb *sandbox) {
	cctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	var st backend.Stats
	var err error
	if ts, ok := s.backend.(tokenStats); ok {
		s.mu.RLock()
		token := agentapi.LinkToken(sb.route.AccessToken)
		s.mu.RUnlock()
		st, err = ts.StatsWithToken(cctx, sb.id, token)
	} else {
		st, err = s.backend.Stats(cctx, sb.id)
	}
	if errors.Is(err, backend.ErrNotFound) {
		s.checkGone(ctx, sb)
		return
	}
	if err != nil {
		s.log.Warn("sample sandbox", "sandbox", sb.id, "err", err)
		return
	}
	if st.Timestamp.IsZero() {
		st.Timestamp = time.Now()
	}
	sb.metrics.add(st)
}

// checkGone confirms with backend.Lookup that sb vanished and records it killed.
func (s *Service) checkGone(ctx context.Context, sb *sandbox) {
	sb.op.Lock()
	defer sb.op.Unlock()
	s.mu.RLock()
	gone := sb.gone
	s.mu.RUnlock()
	if gone {
		return
	}
	if _, err := s.backend.Lookup(ctx, sb.id); errors.Is(err, backend.ErrNotFound) {
		s.loseLocked(context.WithoutCancel(ctx), sb)
	}
}

// metricsOf returns sb's samples within [start, end] (unix seconds) as API
// values (docs/wire/e2b-api.md §2.2 SandboxMetric).
func metricsOf(sb *sandbox, start, end int64) []api.SandboxMetric {
	samples := sb.metrics.between(start, end)
	out := make([]api.SandboxMetric, 0, len(samples))
	for _, st := range samples {
		out = append(out, api.SandboxMetric{
			Timestamp: st.Timestamp.UTC(), TimestampUnix: st.Timestamp.Unix(),
			CpuCount: int32(st.CPUCount), CpuUsedPct: st.CPUUsedPct,
			MemUsed: int64(st.MemUsed), MemTotal: int64(st.MemTotal), MemCache: int64(st.MemCache),
			DiskUsed: int64(st.DiskUsed), DiskTotal: int64(st.DiskTotal),
		})
	}
	return out
}
