package telemetry

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// states is a StateCounter with settable counts.
type states struct {
	mu sync.Mutex
	m  map[string]int
}

func (s *states) SandboxStates() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.m {
		out[k] = v
	}
	return out
}

// scrape fetches m's exposition through its HTTP handler.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape status %d: %s", resp.StatusCode, body)
	}
	return string(body)
}

func wantLine(t *testing.T, exposition, line string) {
	t.Helper()
	for _, l := range strings.Split(exposition, "\n") {
		if l == line {
			return
		}
	}
	t.Errorf("exposition lacks %q", line)
}

func TestSandboxStates(t *testing.T) {
	m := New()
	src := &states{m: map[string]int{"running": 2}}
	if err := m.WatchStates(src); err != nil {
		t.Fatal(err)
	}
	out := scrape(t, m)
	wantLine(t, out, `cubby_sandboxes{state="running"} 2`)
	wantLine(t, out, `cubby_sandboxes{state="paused"} 0`)
	src.mu.Lock()
	src.m = map[string]int{"running": 1, "paused": 3}
	src.mu.Unlock()
	out = scrape(t, m)
	wantLine(t, out, `cubby_sandboxes{state="running"} 1`)
	wantLine(t, out, `cubby_sandboxes{state="paused"} 3`)
	if err := m.WatchStates(src); err == nil {
		t.Error("second WatchStates: want an error")
	}
}

func TestCountersAndHistogram(t *testing.T) {
	m := New()
	m.ObserveCreate("base", OutcomeOK, 300*time.Millisecond)
	m.ObserveCreate("base", OutcomeOK, 3*time.Second)
	m.ObserveCreate("base", OutcomeError, time.Second)
	m.SandboxKilled("timeout")
	m.SandboxKilled("timeout")
	m.TemplateBuilt(OutcomeOK)
	out := scrape(t, m)
	wantLine(t, out, `cubby_sandbox_create_duration_seconds_count{outcome="ok",template="base"} 2`)
	wantLine(t, out, `cubby_sandbox_create_duration_seconds_sum{outcome="ok",template="base"} 3.3`)
	wantLine(t, out, `cubby_sandbox_create_duration_seconds_bucket{outcome="ok",template="base",le="0.16"} 0`)
	wantLine(t, out, `cubby_sandbox_create_duration_seconds_bucket{outcome="ok",template="base",le="0.32"} 1`)
	wantLine(t, out, `cubby_sandbox_create_duration_seconds_count{outcome="error",template="base"} 1`)
	wantLine(t, out, `cubby_sandbox_kills_total{reason="timeout"} 2`)
	wantLine(t, out, `cubby_template_builds_total{outcome="ok"} 1`)
	if !strings.Contains(out, "go_goroutines ") || !strings.Contains(out, "process_") {
		t.Error("runtime and process collectors missing")
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.ObserveCreate("base", OutcomeOK, time.Second)
	m.SandboxKilled("request")
	m.TemplateBuilt(OutcomeError)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	rec := httptest.NewRecorder()
	m.InstrumentGateway(m.InstrumentAPI(h)).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusTeapot {
		t.Fatalf("status %d", rec.Code)
	}
}

// TestInstrument runs a gateway-like front handler over a real listener: paths
// under /sandbox/ are "sandbox-side" (not passed to the API), the rest go to an
// instrumented API mux.
func TestInstrument(t *testing.T) {
	m := New()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sandboxes/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) })
	mux.HandleFunc("POST /sandboxes", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{}") })
	api := m.InstrumentAPI(mux)
	front := m.InstrumentGateway(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/sandbox/upgrade":
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack through the wrappers: %v", err)
				return
			}
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
			_ = brw.Flush()
			_ = conn.Close()
		case strings.HasPrefix(r.URL.Path, "/sandbox/"):
			w.WriteHeader(http.StatusBadGateway)
		default:
			api.ServeHTTP(w, r)
		}
	}))
	srv := httptest.NewServer(front)
	defer srv.Close()
	do := func(method, path string) {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	do("GET", "/sandboxes/abc")
	do("GET", "/sandboxes/def")
	do("POST", "/sandboxes")
	do("GET", "/nothing")
	do("GET", "/sandbox/x")
	upgrade(t, srv.Listener.Addr().String())

	// The upgrade is counted when its handler returns, which may be after the
	// client has read the 101.
	var out string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		out = scrape(t, m)
		if strings.Contains(out, `cubby_gateway_requests_total{code="1xx"} 1`) || time.Now().After(deadline) {
			break
		}
	}
	wantLine(t, out, `cubby_api_requests_total{code="404",route="GET /sandboxes/{id}"} 2`)
	wantLine(t, out, `cubby_api_requests_total{code="200",route="POST /sandboxes"} 1`)
	wantLine(t, out, `cubby_api_requests_total{code="404",route="unmatched"} 1`)
	wantLine(t, out, `cubby_gateway_requests_total{code="5xx"} 1`)
	wantLine(t, out, `cubby_gateway_requests_total{code="1xx"} 1`)
	if strings.Contains(out, `cubby_gateway_requests_total{code="2xx"}`) || strings.Contains(out, `cubby_gateway_requests_total{code="4xx"}`) {
		t.Errorf("API requests counted as gateway requests:\n%s", out)
	}
}

// upgrade sends a protocol-upgrade request and reads the 101 answer.
func upgrade(t *testing.T, addr string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_, _ = io.WriteString(conn, "GET /sandbox/upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n")
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.Contains(status, "101") {
		t.Fatalf("upgrade answer %q, %v", status, err)
	}
}
