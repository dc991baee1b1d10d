package controlplane

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/telemetry"
)

// exposition scrapes m through its HTTP handler.
func exposition(t *testing.T, m *telemetry.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

func hasLine(out, line string) bool {
	for _, l := range strings.Split(out, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

func TestTelemetryHooks(t *testing.T) {
	h := newHarness(t, Config{})
	h.stop() // restart with a Metrics attached
	h.metrics = telemetry.New()
	h.start()
	if err := h.metrics.WatchStates(h.svc); err != nil {
		t.Fatal(err)
	}
	a := h.create(map[string]any{"templateID": "base"})
	b := h.create(map[string]any{"templateID": "base"})
	if r := h.do("POST", "/sandboxes/"+b+"/pause", nil); r.status != http.StatusNoContent {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	out := exposition(t, h.metrics)
	for _, want := range []string{
		`cubby_sandboxes{state="running"} 1`,
		`cubby_sandboxes{state="paused"} 1`,
		`cubby_sandbox_create_duration_seconds_count{outcome="ok",template="tplbase1"} 2`,
	} {
		if !hasLine(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	if r := h.do("DELETE", "/sandboxes/"+a, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d", r.status)
	}
	h.fake.mu.Lock()
	h.fake.createErr = errors.New("no room")
	h.fake.mu.Unlock()
	if r := h.do("POST", "/v2/sandboxes", map[string]any{"templateID": "base"}); r.status < 500 {
		t.Fatalf("failing create: %d", r.status)
	}
	out = exposition(t, h.metrics)
	for _, want := range []string{
		`cubby_sandboxes{state="running"} 0`,
		`cubby_sandbox_kills_total{reason="request"} 1`,
		`cubby_sandbox_kills_total{reason="create_failed"} 1`,
		`cubby_sandbox_create_duration_seconds_count{outcome="error",template="tplbase1"} 1`,
	} {
		if !hasLine(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
}
