package controlplane

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/store"
)

// sharedFake is the test-only fakeBackend (a mock) shared by several
// replicas, as the kubernetes backend is: it reports sandboxes coming up and
// going to every subscriber, records deadlines without publishing them
// (so replicas learn them from the store), and cannot pause.
type sharedFake struct {
	*fakeBackend
	smu       sync.Mutex
	subs      []func(backend.Event)
	deadlines map[string]time.Time
}

func newSharedFake() *sharedFake {
	return &sharedFake{fakeBackend: newFakeBackend(), deadlines: map[string]time.Time{}}
}

func (f *sharedFake) Subscribe(fn func(backend.Event)) {
	f.smu.Lock()
	defer f.smu.Unlock()
	f.subs = append(f.subs, fn)
}

func (f *sharedFake) emit(ev backend.Event) {
	f.smu.Lock()
	subs := f.subs
	f.smu.Unlock()
	for _, fn := range subs {
		fn(ev)
	}
}

func (f *sharedFake) SetDeadline(_ context.Context, id string, t time.Time) error {
	f.smu.Lock()
	defer f.smu.Unlock()
	f.deadlines[id] = t
	return nil
}

func (f *sharedFake) CanPause() bool { return false }

func (f *sharedFake) Create(ctx context.Context, req backend.CreateRequest) (backend.Instance, error) {
	in, err := f.fakeBackend.Create(ctx, req)
	if err == nil {
		f.emit(backend.Event{Kind: backend.EventUp, SandboxID: in.SandboxID, Instance: in})
	}
	return in, err
}

func (f *sharedFake) Kill(ctx context.Context, id string) error {
	had := f.has(id)
	err := f.fakeBackend.Kill(ctx, id)
	if had {
		f.emit(backend.Event{Kind: backend.EventGone, SandboxID: id, Reason: "pod deleted"})
	}
	return err
}

// Pause and Resume are refused as the kubernetes backend refuses them.
func (f *sharedFake) Pause(context.Context, string, backend.PauseOptions) (backend.PauseMode, error) {
	return "", backend.ErrNotSupported
}

// cluster is two replicas (Services) sharing one store and one sharedFake.
type cluster struct {
	t        *testing.T
	h        *harness // replica 0 (and the store, keys, templates)
	fake     *sharedFake
	replicas []*Service
	srvs     []*httptest.Server
}

func newCluster(t *testing.T, health func() error) *cluster {
	t.Helper()
	h := newHarness(t, Config{})
	c := &cluster{t: t, h: h, fake: newSharedFake()}
	h.stop() // replica 0 is rebuilt on the shared backend
	for range 2 {
		svc, err := New(withTestDefaults(Config{}), Deps{Store: h.store, Backend: c.fake, Templates: harnessTemplates, Health: health})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(svc.Handler())
		t.Cleanup(func() {
			srv.Close()
			_ = svc.Shutdown(context.Background())
		})
		c.replicas, c.srvs = append(c.replicas, svc), append(c.srvs, srv)
	}
	return c
}

// on sends a request to replica i.
func (c *cluster) on(i int, method, path string, body any) response {
	c.t.Helper()
	c.h.srv = c.srvs[i]
	return c.h.do(method, path, body)
}

func (c *cluster) create(i int, body map[string]any) string {
	c.t.Helper()
	c.h.srv = c.srvs[i]
	return c.h.create(body)
}

// TestClusterServesEveryReplica: a sandbox created through one replica is
// routed and killed by the other (adopted from the store on first use); the
// creator drops it on the backend's gone event; a second kill answers 404.
func TestClusterServesEveryReplica(t *testing.T) {
	c := newCluster(t, nil)
	id := c.create(0, map[string]any{"templateID": "base"})
	rt, ok := c.replicas[1].Route(id)
	if !ok || !rt.Running || rt.AccessToken == "" || rt.AccessToken != c.h.record(id).AccessToken {
		t.Fatalf("route through the other replica = %+v, %v", rt, ok)
	}
	if r := c.on(1, "DELETE", "/sandboxes/"+id, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill through the other replica: %d %s", r.status, r.body)
	}
	eventually(t, func() bool { _, ok := c.replicas[0].Route(id); return !ok })
	wantError(t, c.on(0, "DELETE", "/sandboxes/"+id, nil), http.StatusNotFound)
	if rec := c.h.record(id); rec.KillReason != reasonRequest {
		t.Fatalf("kill reason %q", rec.KillReason)
	}
}

// TestClusterExpiryWhileLeading: no replica arms TTLs until one leads; the
// leader then kills a sandbox past its deadline.
func TestClusterExpiryWhileLeading(t *testing.T) {
	c := newCluster(t, nil)
	id := c.create(0, map[string]any{"templateID": "base", "timeout": 1})
	time.Sleep(1500 * time.Millisecond)
	if rec := c.h.record(id); rec.State != store.StateRunning {
		t.Fatalf("expired without a leader: %+v", rec)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.replicas[1].Lead(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	rec := c.h.waitState(id, store.StateKilled)
	if rec.KillReason != reasonTimeout {
		t.Fatalf("kill reason %q", rec.KillReason)
	}
}

// TestClusterExtensionWins: a deadline extended through another replica,
// which the leader did not hear of, makes the leader's expiry lose (the
// store's conditional expiry) and re-arm; the sandbox runs on.
func TestClusterExtensionWins(t *testing.T) {
	c := newCluster(t, nil)
	id := c.create(0, map[string]any{"templateID": "base", "timeout": 2})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.replicas[0].Lead(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if r := c.on(1, "POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 60}); r.status != http.StatusNoContent {
		t.Fatalf("set timeout: %d %s", r.status, r.body)
	}
	time.Sleep(3 * time.Second)
	if rec := c.h.record(id); rec.State != store.StateRunning || time.Until(rec.EndAt) < 50*time.Second {
		t.Fatalf("after the old deadline: %+v", rec)
	}
	c.replicas[0].mu.RLock()
	endAt := c.replicas[0].live[id].endAt
	c.replicas[0].mu.RUnlock()
	if time.Until(endAt) < 50*time.Second {
		t.Fatalf("the leader kept the old deadline %s", endAt)
	}
}

// TestClusterGoneRecordsReason: a sandbox the cluster ends on its own is
// recorded killed with the backend's reason and dropped everywhere.
func TestClusterGoneRecordsReason(t *testing.T) {
	c := newCluster(t, nil)
	id := c.create(0, map[string]any{"templateID": "base"})
	_ = c.on(1, "GET", "/sandboxes/"+id, nil)
	_ = c.fake.fakeBackend.Kill(context.Background(), id)
	c.fake.emit(backend.Event{Kind: backend.EventGone, SandboxID: id, Reason: "pod Evicted: The node was low on resource: memory."})
	rec := c.h.waitState(id, store.StateKilled)
	if !strings.Contains(rec.KillReason, "Evicted") || rec.AccessToken != "" {
		t.Fatalf("gone record %+v", rec)
	}
	for i := range c.replicas {
		eventually(t, func() bool { _, ok := c.replicas[i].Route(id); return !ok })
	}
}

// TestClusterNoPause: a backend that cannot pause refuses a pause with 501
// and an automatic pause at create with 400, never a kill in its place.
func TestClusterNoPause(t *testing.T) {
	c := newCluster(t, nil)
	id := c.create(0, map[string]any{"templateID": "base"})
	wantError(t, c.on(1, "POST", "/sandboxes/"+id+"/pause", nil), http.StatusNotImplemented)
	if rec := c.h.record(id); rec.State != store.StateRunning {
		t.Fatalf("after a refused pause: %+v", rec)
	}
	msg := wantError(t, c.on(0, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "autoPause": true}), http.StatusBadRequest)
	if !strings.Contains(msg, "pause") {
		t.Fatalf("message %q", msg)
	}
}

// TestClusterUnhealthyCreates: while the health check fails, creates answer
// 503 and nothing is recorded.
func TestClusterUnhealthyCreates(t *testing.T) {
	var mu sync.Mutex
	var unhealthy error = errors.New("ping postgres: connection refused")
	c := newCluster(t, func() error { mu.Lock(); defer mu.Unlock(); return unhealthy })
	msg := wantError(t, c.on(0, "POST", "/v2/sandboxes", map[string]any{"templateID": "base"}), http.StatusServiceUnavailable)
	if !strings.Contains(msg, "connection refused") {
		t.Fatalf("message %q", msg)
	}
	if all, _ := c.h.store.ListSandboxes(context.Background(), store.SandboxFilter{}); len(all) != 0 {
		t.Fatalf("%d records after a refused create", len(all))
	}
	mu.Lock()
	unhealthy = nil
	mu.Unlock()
	c.create(1, map[string]any{"templateID": "base"})
}

func eventually(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
