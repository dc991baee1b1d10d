package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// createWithKey posts body to POST /v2/sandboxes with an Idempotency-Key.
func (h *harness) createWithKey(apiKey, idemKey string, body map[string]any) response {
	h.t.Helper()
	raw, _ := json.Marshal(body)
	req, err := http.NewRequest("POST", h.srv.URL+"/v2/sandboxes", bytes.NewReader(raw))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-KEY", apiKey)
	req.Header.Set("Idempotency-Key", idemKey)
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: buf.Bytes()}
}

func sandboxID(t *testing.T, r response) string {
	t.Helper()
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	r.json(t, &sb)
	return sb.SandboxID
}

// TestIdempotencyKey: a create repeated with the same key (also concurrently,
// also after a restart) returns the first create's sandbox and creates nothing;
// the same key with another body is a 409 with E2B's error_code; keys are per
// API key; malformed keys are a 400.
func TestIdempotencyKey(t *testing.T) {
	h := newHarness(t, Config{})
	body := map[string]any{"templateID": "base", "metadata": map[string]string{"a": "b"}}
	first := sandboxID(t, h.createWithKey(h.key, "key-1", body))

	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Go(func() { ids[i] = sandboxID(t, h.createWithKey(h.key, "key-1", body)) })
	}
	wg.Wait()
	for _, id := range ids {
		if id != first {
			t.Fatalf("repeated create returned %s, want %s", id, first)
		}
	}
	if n := len(h.fake.creates); n != 1 {
		t.Fatalf("backend creates = %d, want 1", n)
	}

	r := h.createWithKey(h.key, "key-1", map[string]any{"templateID": "base"})
	wantError(t, r, http.StatusConflict)
	var e struct {
		ErrorCode string `json:"error_code"`
	}
	r.json(t, &e)
	if e.ErrorCode != "idempotency_request_mismatch" {
		t.Fatalf("error_code = %q in %s", e.ErrorCode, r.body)
	}

	other, _, err := h.svc.CreateAPIKey(context.Background(), "other")
	if err != nil {
		t.Fatal(err)
	}
	if id := sandboxID(t, h.createWithKey(other, "key-1", body)); id == first {
		t.Fatal("another API key's create with the same Idempotency-Key got the first key's sandbox")
	}
	for _, bad := range []string{"UPPER", "with space", strings.Repeat("k", 256), "under_score"} {
		wantError(t, h.createWithKey(h.key, bad, body), http.StatusBadRequest)
	}

	h.stop()
	h.start()
	if id := sandboxID(t, h.createWithKey(h.key, "key-1", body)); id != first {
		t.Fatalf("after a restart the key gave %s, want %s", id, first)
	}
	if n := len(h.fake.creates); n != 2 {
		t.Fatalf("backend creates = %d, want 2 (one per API key)", n)
	}
}

// TestIdempotencyKeyFailedCreate: a failed create leaves the key unused, so a
// retry creates.
func TestIdempotencyKeyFailedCreate(t *testing.T) {
	h := newHarness(t, Config{})
	h.fake.mu.Lock()
	h.fake.createErr = context.DeadlineExceeded
	h.fake.mu.Unlock()
	if r := h.createWithKey(h.key, "retry-me", map[string]any{}); r.status < 500 {
		t.Fatalf("failing create: %d %s", r.status, r.body)
	}
	h.fake.mu.Lock()
	h.fake.createErr = nil
	h.fake.mu.Unlock()
	sandboxID(t, h.createWithKey(h.key, "retry-me", map[string]any{}))
}
