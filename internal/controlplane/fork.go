package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/admission"
	"github.com/cubby-dev/cubby/internal/store"
)

// Fork limits (E2B's SandboxForkRequest: count 1..100).
const (
	maxForks = 100
	// forkParallel bounds the forks booting at once.
	forkParallel = 4
)

// forkResult is one entry of POST /sandboxes/{id}/fork's answer: E2B's
// SandboxForkResult, exactly one of Sandbox (the created sandbox, as create
// answers it) and Error ({code, message}) set.
type forkResult struct {
	Sandbox any        `json:"sandbox,omitempty"`
	Error   *forkError `json:"error,omitempty"`
}

type forkError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// fork captures sandbox id of caller once (an internal snapshot) and starts
// count sandboxes from it with the source's settings (envs, metadata,
// network and egress policy, lifecycle, volumes) and new identities (ID, address,
// tokens), ttl each. Each fork succeeds or fails on its own (a team over its
// limits gets 429 entries). The capture is deleted at the end: its data stays
// while a fork uses it.
func (s *Service) fork(ctx context.Context, id, caller string, ttl time.Duration, count int) ([]forkResult, error) {
	if count < 1 || count > maxForks {
		return nil, badRequest(fmt.Sprintf("count must be between 1 and %d, got %d", maxForks, count))
	}
	sn, err := s.snapshot(ctx, id, caller, "", true)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := s.store.DeleteSnapshot(context.WithoutCancel(ctx), sn.Team, sn.ID); err != nil {
			s.log.Error("delete fork capture record; pruned at next start", "snapshot", sn.ID, "err", err)
		}
		s.dropSnapshotData(ctx, sn.ID)
	}()
	src, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", id, err)
	}
	sp, err := s.forkSpec(ctx, src, sn, ttl)
	if err != nil {
		return nil, err
	}
	out := make([]forkResult, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, forkParallel)
	for i := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = s.forkOne(ctx, sp)
		}()
	}
	wg.Wait()
	return out, nil
}

// forkOne starts one fork and reports it as a forkResult.
func (s *Service) forkOne(ctx context.Context, sp createSpec) forkResult {
	rec, err := s.create(ctx, sp)
	if err == nil {
		return forkResult{Sandbox: s.sandboxView(rec)}
	}
	var he *httpError
	var ae *admission.Error
	switch {
	case errors.As(err, &he):
		return forkResult{Error: &forkError{Code: he.status, Message: he.msg}}
	case errors.As(err, &ae):
		return forkResult{Error: &forkError{Code: http.StatusTooManyRequests, Message: ae.Message}}
	default:
		return forkResult{Error: &forkError{Code: http.StatusInternalServerError, Message: err.Error()}}
	}
}

// forkSpec is the create spec of a fork of src from its capture sn.
func (s *Service) forkSpec(ctx context.Context, src store.Sandbox, sn store.Snapshot, ttl time.Duration) (createSpec, error) {
	p, err := s.storedPolicy(ctx, src)
	if err != nil {
		return createSpec{}, fmt.Errorf("fork %s: %w", src.ID, err)
	}
	sp := createSpec{
		team: sn.Team, template: sn.ID, ttl: ttl, secure: src.Secure, metadata: src.Metadata, envVars: src.EnvVars,
		allowNet: src.AllowInternetAccess, network: src.Network, lifecycle: src.Lifecycle, traffic: src.PrivateTraffic,
		egress: p, internalSnapshot: true, mounts: mountsView(src.VolumeMounts),
	}
	if p != nil && p.Proxy != nil {
		sp.proxyPass = p.Proxy.Password
	}
	return sp, nil
}

// forkSandbox implements POST /sandboxes/{id}/fork {timeout?, count} → 201
// [forkResult]; 400 for a count outside 1..100, 404 for unknown or other
// teams' sandboxes, 409 while paused.
func (h httpAPI) forkSandbox(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Timeout *int32 `json:"timeout"`
		Count   *int   `json:"count"`
	}
	if !h.readyDecode(w, r, &b, false) {
		return
	}
	ttl, err := h.s.ttl(b.Timeout, defaultTimeoutV2)
	if err == nil && ttl == 0 {
		ttl = defaultTimeoutV2
	}
	count := 1
	if b.Count != nil {
		count = *b.Count
	}
	var out []forkResult
	if err == nil {
		out, err = h.s.fork(r.Context(), r.PathValue("sandboxID"), teamOf(r), ttl, count)
	}
	h.reply(w, r, http.StatusCreated, out, err)
}
