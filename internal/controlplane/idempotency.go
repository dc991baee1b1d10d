package controlplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/store"
)

// idempotencyWindow is how long a create's Idempotency-Key is remembered.
const idempotencyWindow = 24 * time.Hour

// idempotencyKeyRe is the Idempotency-Key syntax E2B's SDKs enforce.
var idempotencyKeyRe = regexp.MustCompile(`^[a-z0-9-]{1,255}$`)

// Machine-readable error codes of idempotent creates (E2B's Error.error_code).
const errCodeIdempotencyMismatch = "idempotency_request_mismatch"

// idemKey identifies one caller's Idempotency-Key.
type idemKey struct{ scope, key string }

// inflight tracks the creates with an Idempotency-Key under way in this process.
type inflight struct {
	mu   sync.Mutex
	busy map[idemKey]chan struct{}
}

// begin returns (nil, true) when the caller may run the create for k, and
// (done, false) when another request is running it: retry after done closes.
func (f *inflight) begin(k idemKey) (<-chan struct{}, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ch, ok := f.busy[k]; ok {
		return ch, false
	}
	if f.busy == nil {
		f.busy = map[idemKey]chan struct{}{}
	}
	f.busy[k] = make(chan struct{})
	return nil, true
}

// end releases k (after begin returned true).
func (f *inflight) end(k idemKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.busy[k])
	delete(f.busy, k)
}

// idempotencyScope is the caller an Idempotency-Key belongs to: its team and a
// hash of the request's API key, so that two callers' keys never collide and a
// replay never crosses teams.
func idempotencyScope(r *http.Request) string {
	sum := sha256.Sum256([]byte(r.Header.Get("X-API-KEY")))
	return teamOf(r) + "/" + hex.EncodeToString(sum[:])
}

// fingerprint hashes what a create asks for (the decoded body, the API version
// and its security), so a key reused for another request is recognised.
func fingerprint(b api.NewSandboxV2, secure bool, def time.Duration) ([]byte, error) {
	data, err := json.Marshal(struct {
		Body   api.NewSandboxV2
		Secure bool
		TTL    time.Duration
	}{b, secure, def})
	if err != nil {
		return nil, fmt.Errorf("fingerprint create request: %w", err)
	}
	sum := sha256.Sum256(data)
	return sum[:], nil
}

// createOnce creates the sandbox of sp unless scope's key already did within
// idempotencyWindow, in which case it returns that sandbox's record (a 409
// httpError when the key came with another request, fp). Concurrent creates
// with the same key run one after the other, so one sandbox is made at most.
// A failed create leaves no record: retrying it creates.
func (s *Service) createOnce(ctx context.Context, k idemKey, fp []byte, sp createSpec) (store.Sandbox, error) {
	for {
		wait, mine := s.idem.begin(k)
		if mine {
			return s.createOrReplay(ctx, k, fp, sp)
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return store.Sandbox{}, ctx.Err()
		}
	}
}

// createOrReplay runs with k held: the recorded sandbox, else a new one.
func (s *Service) createOrReplay(ctx context.Context, k idemKey, fp []byte, sp createSpec) (store.Sandbox, error) {
	defer s.idem.end(k)
	now := time.Now()
	rec, err := s.store.GetIdempotency(ctx, k.scope, k.key, now.Add(-idempotencyWindow))
	switch {
	case err == nil && string(rec.Fingerprint) != string(fp):
		return store.Sandbox{}, &httpError{status: http.StatusConflict, errCode: errCodeIdempotencyMismatch,
			msg: fmt.Sprintf("Idempotency-Key %q was used with a different create request", k.key)}
	case err == nil:
		sb, err := s.store.GetSandbox(ctx, rec.SandboxID)
		if err != nil {
			return store.Sandbox{}, fmt.Errorf("sandbox of Idempotency-Key %q: %w", k.key, err)
		}
		return sb, nil
	case !errors.Is(err, store.ErrNotFound):
		return store.Sandbox{}, err
	}
	sb, err := s.create(ctx, sp)
	if err != nil {
		return store.Sandbox{}, err
	}
	rec = store.IdempotencyRecord{Scope: k.scope, Key: k.key, Fingerprint: fp, SandboxID: sb.ID, CreatedAt: time.Now()}
	if err := s.store.PutIdempotency(context.WithoutCancel(ctx), rec, now.Add(-idempotencyWindow)); err != nil {
		s.log.Error("record Idempotency-Key; a retry would create another sandbox", "sandbox", sb.ID, "err", err)
	}
	return sb, nil
}
