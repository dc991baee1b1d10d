package controlplane

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/store"
)

type detail struct {
	State       string         `json:"state"`
	PauseMode   *string        `json:"pauseMode"`
	PauseMethod *string        `json:"cubbyPauseMethod"`
	EndAt       time.Time      `json:"endAt"`
	Lifecycle   map[string]any `json:"lifecycle"`
}

func (h *harness) detail(id string) detail {
	h.t.Helper()
	var d detail
	r := h.do("GET", "/sandboxes/"+id, nil)
	if r.status != http.StatusOK {
		h.t.Fatalf("get %s: %d %s", id, r.status, r.body)
	}
	r.json(h.t, &d)
	return d
}

func (h *harness) pause(id string, body any) {
	h.t.Helper()
	if r := h.do("POST", "/sandboxes/"+id+"/pause", body); r.status != http.StatusNoContent {
		h.t.Fatalf("pause %s: %d %s", id, r.status, r.body)
	}
}

func (h *harness) timerArmed(id string) bool {
	h.svc.mu.RLock()
	defer h.svc.mu.RUnlock()
	sb := h.svc.live[id]
	return sb != nil && sb.timer != nil
}

// TestPauseModes: the pause body's `memory` reaches the backend (default true),
// getInfo reports the backend's mode while paused and omits it while running, and
// the TTL is disarmed while paused and re-armed by connect's timeout.
func TestPauseModes(t *testing.T) {
	h := newHarness(t, Config{})
	for _, tc := range []struct {
		body         any
		keep         bool
		mode, method string
	}{
		{nil, true, "full", "freeze"},
		{map[string]any{}, true, "full", "freeze"},
		{map[string]any{"memory": true}, true, "full", "freeze"},
		{map[string]any{"memory": false}, false, "filesystem", "filesystem"},
	} {
		id := h.create(map[string]any{"timeout": 600})
		if d := h.detail(id); d.PauseMode != nil || d.State != "running" {
			t.Fatalf("running detail = %+v", d)
		}
		h.pause(id, tc.body)
		if got := h.fake.lastPause(); got.KeepMemory != tc.keep {
			t.Fatalf("body %v: KeepMemory = %v", tc.body, got.KeepMemory)
		}
		d := h.detail(id)
		if d.State != "paused" || d.PauseMode == nil || *d.PauseMode != tc.mode ||
			d.PauseMethod == nil || *d.PauseMethod != tc.method {
			t.Fatalf("body %v: paused detail = %+v", tc.body, d)
		}
		if h.timerArmed(id) {
			t.Fatal("TTL still armed while paused")
		}
		r := h.do("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 30})
		if r.status != http.StatusCreated {
			t.Fatalf("connect paused: %d %s", r.status, r.body)
		}
		d = h.detail(id)
		if d.State != "running" || d.PauseMode != nil || d.PauseMethod != nil || !h.timerArmed(id) {
			t.Fatalf("resumed detail = %+v, armed %v", d, h.timerArmed(id))
		}
		if until := time.Until(d.EndAt); until > 31*time.Second || until < 20*time.Second {
			t.Fatalf("endAt after resume with timeout 30 s is %v away", until)
		}
	}
}

// TestPauseFailureKeepsRunning: a failed pause (e.g. disk full during a
// checkpoint) is a 500, and the sandbox stays running and routed with its TTL.
func TestPauseFailureKeepsRunning(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{"timeout": 600})
	h.fake.mu.Lock()
	h.fake.pauseErr = func(backend.PauseOptions) error { return errors.New("checkpoint: no space left on device") }
	h.fake.mu.Unlock()
	wantError(t, h.do("POST", "/sandboxes/"+id+"/pause", nil), 500)
	if rt, ok := h.svc.Route(id); !ok || !rt.Running || !h.timerArmed(id) {
		t.Fatalf("route after failed pause = %+v %v", rt, ok)
	}
	if rec := h.record(id); rec.State != store.StateRunning {
		t.Fatalf("record state = %s", rec.State)
	}
}

// TestPauseFailureLeftPaused: when a failed pause leaves the sandbox paused in
// the backend (it could not be restarted), the control plane records it paused
// with the backend's mode instead of routing to a stopped sandbox.
func TestPauseFailureLeftPaused(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{"timeout": 600})
	h.fake.mu.Lock()
	h.fake.pauseErr = func(backend.PauseOptions) error {
		in := h.fake.instances[id] // called with h.fake.mu held
		in.Paused, in.PauseMode = true, backend.PauseFilesystem
		return errors.New("checkpoint failed and the restart failed too")
	}
	h.fake.mu.Unlock()
	wantError(t, h.do("POST", "/sandboxes/"+id+"/pause", nil), 500)
	if d := h.detail(id); d.State != "paused" || d.PauseMode == nil || *d.PauseMode != "filesystem" {
		t.Fatalf("detail = %+v", d)
	}
	if rt, _ := h.svc.Route(id); rt.Running || h.timerArmed(id) {
		t.Fatalf("route = %+v, armed %v", rt, h.timerArmed(id))
	}
	h.fake.mu.Lock()
	h.fake.pauseErr = nil
	h.fake.mu.Unlock()
	if r := h.do("POST", "/sandboxes/"+id+"/connect", nil); r.status != http.StatusCreated {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
}

// TestResumeFailureStaysPaused: a failed resume is a 500 and the sandbox stays
// paused (and can be resumed later).
func TestResumeFailureStaysPaused(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{"timeout": 600})
	h.pause(id, map[string]any{"memory": false})
	h.fake.mu.Lock()
	h.fake.resumeErr = errors.New("remount: e2fsck failed")
	h.fake.mu.Unlock()
	wantError(t, h.do("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 30}), 500)
	if d := h.detail(id); d.State != "paused" || d.PauseMode == nil || *d.PauseMode != "filesystem" {
		t.Fatalf("detail after failed resume = %+v", d)
	}
	h.fake.mu.Lock()
	h.fake.resumeErr = nil
	h.fake.mu.Unlock()
	if r := h.do("POST", "/sandboxes/"+id+"/connect", nil); r.status != http.StatusCreated {
		t.Fatalf("second resume: %d %s", r.status, r.body)
	}
}

// TestAutoPauseMemory: autoPause keeps memory unless autoPauseMemory is false;
// when a memory pause fails at the deadline it falls back to a filesystem pause,
// and when every pause fails the sandbox is retried, never killed.
func TestAutoPauseMemory(t *testing.T) {
	h := newHarness(t, Config{})
	kept := h.create(map[string]any{"timeout": 1, "autoPause": true})
	h.waitKilled(kept, 10*time.Second)
	if d := h.detail(kept); d.State != "paused" || *d.PauseMode != "full" {
		t.Fatalf("autoPause default: %+v", d)
	}
	fs := h.create(map[string]any{"timeout": 1, "autoPause": true, "autoPauseMemory": false})
	h.waitKilled(fs, 10*time.Second)
	if d := h.detail(fs); d.State != "paused" || *d.PauseMode != "filesystem" {
		t.Fatalf("autoPauseMemory=false: %+v", d)
	}

	h.fake.mu.Lock()
	h.fake.pauseErr = func(o backend.PauseOptions) error {
		if o.KeepMemory {
			return errors.New("checkpoint: no space left on device")
		}
		return nil
	}
	h.fake.mu.Unlock()
	fallback := h.create(map[string]any{"timeout": 1, "autoPause": true})
	h.waitKilled(fallback, 10*time.Second)
	if d := h.detail(fallback); d.State != "paused" || *d.PauseMode != "filesystem" {
		t.Fatalf("fallback: %+v", d)
	}

	failures := make(chan struct{}, 100)
	h.fake.mu.Lock()
	h.fake.pauseErr = func(backend.PauseOptions) error {
		failures <- struct{}{}
		return errors.New("disk full")
	}
	h.fake.mu.Unlock()
	stuck := h.create(map[string]any{"timeout": 1, "autoPause": true})
	for range 4 { // two attempts per expiry: the deadline and one retry
		select {
		case <-failures:
		case <-time.After(20 * time.Second):
			t.Fatal("no retried pause")
		}
	}
	if rec := h.record(stuck); rec.State != store.StateRunning || !h.fake.has(stuck) {
		t.Fatalf("failing autoPause killed the sandbox: %+v", rec)
	}
}

// TestWake: traffic-driven resume for autoResume sandboxes only; concurrent wakes
// resume once; killed and unknown sandboxes are not woken.
func TestWake(t *testing.T) {
	h := newHarness(t, Config{})
	ctx := context.Background()
	auto := h.create(map[string]any{"timeout": 600, "autoResume": map[string]bool{"enabled": true}})
	manual := h.create(map[string]any{"timeout": 600})
	if d := h.detail(auto); d.Lifecycle["autoResume"] != true || d.Lifecycle["onTimeout"] != "kill" {
		t.Fatalf("lifecycle = %v", d.Lifecycle)
	}
	if rt, ok, err := h.svc.Wake(ctx, auto); err != nil || !ok || !rt.Running {
		t.Fatalf("wake running = %+v %v %v", rt, ok, err)
	}
	h.pause(auto, nil)
	h.pause(manual, nil)
	if _, ok, err := h.svc.Wake(ctx, manual); ok || err != nil {
		t.Fatalf("woke a sandbox without autoResume: %v %v", ok, err)
	}
	results := make(chan bool, 4)
	for range 4 {
		go func() {
			rt, ok, err := h.svc.Wake(ctx, auto)
			results <- err == nil && ok && rt.Running
		}()
	}
	for range 4 {
		if !<-results {
			t.Fatal("concurrent wake failed")
		}
	}
	if d := h.detail(auto); d.State != "running" || time.Until(d.EndAt) < 200*time.Second {
		t.Fatalf("woken detail = %+v", d)
	}
	h.fake.mu.Lock()
	resumes := h.fake.resumes
	h.fake.mu.Unlock()
	if resumes != 1 {
		t.Fatalf("backend resumes = %d, want 1", resumes)
	}
	if r := h.do("DELETE", "/sandboxes/"+auto, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d", r.status)
	}
	if _, ok, _ := h.svc.Wake(ctx, auto); ok {
		t.Fatal("woke a killed sandbox")
	}
	if _, ok, _ := h.svc.Wake(ctx, "nosuchsandbox000000"); ok {
		t.Fatal("woke an unknown sandbox")
	}
	wantError(t, h.do("POST", "/sandboxes/"+auto+"/connect", nil), 404)
	wantError(t, h.do("POST", "/sandboxes/"+auto+"/pause", nil), 404)
}

// TestRecoverPauseModes: after a restart, sandboxes the backend reports paused in
// each mode are listed paused with their mode and resume through connect.
func TestRecoverPauseModes(t *testing.T) {
	h := newHarness(t, Config{})
	mem := h.create(map[string]any{"timeout": 600})
	fs := h.create(map[string]any{"timeout": 600})
	h.pause(mem, nil)
	h.pause(fs, map[string]any{"memory": false})
	h.stop()
	h.start()
	for id, mode := range map[string]string{mem: "full", fs: "filesystem"} {
		if d := h.detail(id); d.State != "paused" || d.PauseMode == nil || *d.PauseMode != mode {
			t.Fatalf("%s after restart = %+v", mode, d)
		}
		if r := h.do("POST", "/sandboxes/"+id+"/connect", nil); r.status != http.StatusCreated {
			t.Fatalf("resume %s after restart: %d %s", mode, r.status, r.body)
		}
	}
}

// TestKillOutlivesCancelledRequest: a kill whose request is cancelled midway
// (the client disconnected) still stops the sandbox in the backend with a live
// context, so nothing is stranded until the next start.
func TestKillOutlivesCancelledRequest(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{"templateID": "base"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.svc.kill(ctx, id, serverCaller, reasonRequest); err != nil {
		t.Fatalf("kill with a cancelled request: %v", err)
	}
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	if len(h.fake.killCtx) != 1 || h.fake.killCtx[0] != nil {
		t.Fatalf("backend Kill saw context errors %v, want one live context", h.fake.killCtx)
	}
	if _, alive := h.fake.instances[id]; alive {
		t.Fatal("sandbox still in the backend after the kill")
	}
}

// rekeyingBackend is the fake backend with the rekeyer interface: it records
// the sandboxes and tokens it was asked to re-key.
type rekeyingBackend struct {
	*fakeBackend
	mu    sync.Mutex
	calls map[string]string
}

func (r *rekeyingBackend) Rekey(_ context.Context, id, accessToken string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[id] = accessToken
	return true, nil
}

// TestRecoverRekeys: a backend that re-keys agents an older release
// initialised is asked to, at recovery, for every running sandbox with the
// record's access token; paused sandboxes are left to their resume.
func TestRecoverRekeys(t *testing.T) {
	h := newHarness(t, Config{})
	a := h.create(map[string]any{"timeout": 600, "secure": true})
	b := h.create(map[string]any{"timeout": 600, "secure": true})
	paused := h.create(map[string]any{"timeout": 600, "secure": true})
	h.pause(paused, nil)
	h.stop()
	rb := &rekeyingBackend{calls: map[string]string{}}
	h.wrap = func(f *fakeBackend) backend.Backend { rb.fakeBackend = f; return rb }
	h.start()
	rb.mu.Lock()
	defer rb.mu.Unlock()
	want := map[string]string{a: h.record(a).AccessToken, b: h.record(b).AccessToken}
	if want[a] == "" || want[a] == want[b] || !maps.Equal(rb.calls, want) {
		t.Fatalf("re-keyed %v, want %v", rb.calls, want)
	}
}
