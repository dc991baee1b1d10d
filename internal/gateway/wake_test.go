package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// wakingControlPlane is a test double of the control plane that also implements
// Waker: sandboxes in autoResume may be resumed by traffic; wakes counts resumes.
type wakingControlPlane struct {
	*fakeControlPlane
	mu         sync.Mutex
	autoResume map[string]bool
	wakes      map[string]int
	failWake   error
}

func (w *wakingControlPlane) Wake(_ context.Context, id string) (Target, bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.Resolve(id)
	if !ok {
		return Target{}, false, nil
	}
	if t.Running {
		return t, true, nil
	}
	if !w.autoResume[id] {
		return Target{}, false, nil
	}
	if w.failWake != nil {
		return Target{}, false, w.failWake
	}
	w.wakes[id]++
	t.Running = true
	w.set(t)
	return t, true, nil
}

func newWakingEnv(t *testing.T) (*wakingControlPlane, *httptest.Server) {
	t.Helper()
	cp := &wakingControlPlane{fakeControlPlane: newFakeControlPlane(), autoResume: map[string]bool{}, wakes: map[string]int{}}
	gw := New(cp, Config{}, nil)
	srv := httptest.NewUnstartedServer(gw.Handler(http.NotFoundHandler()))
	_ = srv.Listener.Close()
	srv.Listener = listenLoopback(t, 0)
	srv.Config.ConnContext = gw.ConnContext
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		gw.CloseIdleConnections()
	})
	return cp, srv
}

func routed(t *testing.T, srv *httptest.Server, id string, port int) *http.Request {
	t.Helper()
	r, err := http.NewRequest("GET", srv.URL+"/health", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set(HeaderSandboxID, id)
	r.Header.Set(HeaderSandboxPort, fmt.Sprint(port))
	return r
}

// TestAutoResume: a request to a paused sandbox with autoResume resumes it once
// (concurrent requests included) and is proxied; without autoResume, or when the
// resume fails, the answer stays 502.
func TestAutoResume(t *testing.T) {
	cp, srv := newWakingEnv(t)
	sb := startSandbox(t, 0, echoHandler("A"))
	auto, manual, failing := randomID(), randomID(), randomID()
	for _, id := range []string{auto, manual, failing} {
		cp.set(Target{ID: id, Addr: sb.addr, Running: false})
	}
	cp.autoResume[auto] = true
	cp.autoResume[failing] = true

	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := srv.Client().Do(routed(t, srv, auto, sb.port))
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Sprintf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("request to auto-resumed sandbox: %s", e)
	}
	if n := cp.wakes[auto]; n != 1 {
		t.Fatalf("wakes = %d, want 1", n)
	}

	code, body, _ := do(t, srv.Client(), routed(t, srv, manual, sb.port))
	if code != http.StatusBadGateway || !strings.Contains(body, "The sandbox was not found") {
		t.Fatalf("paused without autoResume: %d %s", code, body)
	}
	cp.mu.Lock()
	cp.failWake = errors.New("restore failed")
	cp.mu.Unlock()
	if code, body, _ := do(t, srv.Client(), routed(t, srv, failing, sb.port)); code != http.StatusBadGateway {
		t.Fatalf("failed resume: %d %s", code, body)
	}
	if code, _, _ := do(t, srv.Client(), routed(t, srv, randomID(), sb.port)); code != http.StatusBadGateway {
		t.Fatalf("unknown sandbox: %d", code)
	}
}
