package pool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
)

type resolver struct {
	mu     sync.Mutex
	rootfs string
}

func (r *resolver) resolve(_ context.Context, template string) (backend.CreateRequest, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if template != "tpl" {
		return backend.CreateRequest{}, errors.New("no such template")
	}
	return backend.CreateRequest{TemplateID: "tplid", RootfsDir: r.rootfs, CPUCount: 2, MemoryMB: 1024, DiskSizeMB: 1024,
		Init: agentapi.InitRequest{DefaultUser: "user"}}, nil
}

func (r *resolver) rebuild(rootfs string) {
	r.mu.Lock()
	r.rootfs = rootfs
	r.mu.Unlock()
}

func newTestPool(t *testing.T, f *fakeBackend, size int, budget uint64) (*Pool, *resolver) {
	t.Helper()
	r := &resolver{rootfs: "/t/v1"}
	var n int
	var mu sync.Mutex
	p := New(Config{
		Backend: f, Targets: []Target{{Template: "tpl", Size: size}, {Template: "missing", Size: 3}},
		Resolve: r.resolve,
		NewID: func() string {
			mu.Lock()
			defer mu.Unlock()
			n++
			return fmt.Sprintf("sbx%017d", n)
		},
		Ready:        func(context.Context, backend.Instance) error { return nil },
		MemoryBudget: budget, HostReserve: 1, Quiet: -1,
	})
	return p, r
}

func waitReady(t *testing.T, p *Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats()["tplid"].Ready != n {
		if time.Now().After(deadline) {
			t.Fatalf("pool ready = %d, want %d", p.Stats()["tplid"].Ready, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func run(t *testing.T, p *Pool) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return cancel
}

func claimReq(r *resolver) backend.CreateRequest {
	req, _ := r.resolve(context.Background(), "tpl")
	req.SandboxID = "coldcoldcoldcoldcold"
	req.Init = agentapi.InitRequest{AccessToken: "tok", EnvVars: map[string]string{"A": "1"}, DefaultUser: "user"}
	return req
}

func TestClaimHandsOutWarmSandboxWithInit(t *testing.T) {
	f := newFake()
	p, r := newTestPool(t, f, 2, 0)
	run(t, p)
	waitReady(t, p, 2)
	in, ok := p.Claim(context.Background(), claimReq(r))
	if !ok {
		t.Fatal("claim missed a full pool")
	}
	f.mu.Lock()
	got := f.inits[in.SandboxID]
	f.mu.Unlock()
	if got.AccessToken != "tok" || got.EnvVars["A"] != "1" {
		t.Fatalf("claimed sandbox init = %+v, want the request's", got)
	}
	waitReady(t, p, 2) // refilled
	if n := len(f.liveIDs()); n != 3 {
		t.Fatalf("live sandboxes = %d, want 3 (1 claimed + 2 warm)", n)
	}
}

func TestClaimMissesOnOtherShapes(t *testing.T) {
	f := newFake()
	p, r := newTestPool(t, f, 1, 0)
	run(t, p)
	waitReady(t, p, 1)
	for name, mutate := range map[string]func(*backend.CreateRequest){
		"other memory":  func(q *backend.CreateRequest) { q.MemoryMB = 2048 },
		"other rootfs":  func(q *backend.CreateRequest) { q.RootfsDir = "/t/v0" },
		"other runtime": func(q *backend.CreateRequest) { q.Runtime = "runsc" },
	} {
		req := claimReq(r)
		mutate(&req)
		if _, ok := p.Claim(context.Background(), req); ok {
			t.Errorf("%s: claim hit, want a miss", name)
		}
	}
}

func TestClaimBlocksInternetWhenAsked(t *testing.T) {
	f := newFake()
	p, r := newTestPool(t, f, 1, 0)
	run(t, p)
	waitReady(t, p, 1)
	req := claimReq(r)
	req.NoInternet = true
	in, ok := p.Claim(context.Background(), req)
	if !ok {
		t.Fatal("claim without internet access missed")
	}
	f.mu.Lock()
	blocked := f.blocked[in.SandboxID]
	f.mu.Unlock()
	if !blocked {
		t.Fatal("claimed sandbox still has internet access")
	}
}

func TestClaimSkipsSandboxFailingInit(t *testing.T) {
	f := newFake()
	p, r := newTestPool(t, f, 2, 0)
	run(t, p)
	waitReady(t, p, 2)
	ids := f.liveIDs()
	f.mu.Lock()
	// No replacement can boot: the refill loop keeps running, as in the
	// server, but only the two warm sandboxes exist.
	f.createErr = errors.New("no more boots")
	for _, id := range ids {
		f.failInit[id] = true
	}
	f.mu.Unlock()
	if _, ok := p.Claim(context.Background(), claimReq(r)); ok {
		t.Fatal("claim succeeded although every warm sandbox failed its init")
	}
	if live := f.liveIDs(); len(live) != 0 {
		t.Fatalf("sandboxes failing init were not killed: %v", live)
	}
}

func TestRebuiltTemplateReplacesWarmSandboxes(t *testing.T) {
	f := newFake()
	p, r := newTestPool(t, f, 2, 0)
	run(t, p)
	waitReady(t, p, 2)
	old := f.liveIDs()
	r.rebuild("/t/v2")
	p.signal()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		stale := 0
		for _, id := range old {
			if _, ok := f.live[id]; ok {
				stale++
			}
		}
		f.mu.Unlock()
		if stale == 0 && p.Stats()["tplid"].Ready == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stale warm sandboxes left: %d, ready %d", stale, p.Stats()["tplid"].Ready)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, ok := p.Claim(context.Background(), claimReq(r)); !ok {
		t.Fatal("claim after the rebuild missed")
	}
}

func TestMemoryBudgetCapsPool(t *testing.T) {
	f := newFake()
	// Each sandbox measures 100 MiB: a 350 MiB budget holds 3 of the 10 asked
	// for, however many refill rounds run.
	p, _ := newTestPool(t, f, 10, 350<<20)
	p.memEst[key{"tplid", "/t/v1", "", 2, 1024, 1024, ""}] = 100 << 20
	p.cfg.Interval = 5 * time.Millisecond
	run(t, p)
	waitReady(t, p, 3)
	time.Sleep(100 * time.Millisecond) // about 20 more rounds
	if got := p.Stats()["tplid"]; got.Ready != 3 || got.MemoryBytes != 300<<20 {
		t.Fatalf("pool = %+v, want 3 ready holding 300 MiB", got)
	}
}

func TestDrainKillsWarmSandboxes(t *testing.T) {
	f := newFake()
	p, _ := newTestPool(t, f, 3, 0)
	cancel := run(t, p)
	waitReady(t, p, 3)
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for len(f.liveIDs()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("warm sandboxes left after Run returned: %v", f.liveIDs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestVanishedSandboxIsReplaced(t *testing.T) {
	f := newFake()
	p, _ := newTestPool(t, f, 1, 0)
	p.cfg.Interval = 10 * time.Millisecond
	run(t, p)
	waitReady(t, p, 1)
	first := f.liveIDs()[0]
	_ = f.Kill(context.Background(), first) // its init exited on its own
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids := f.liveIDs()
		if len(ids) == 1 && ids[0] != first && p.Stats()["tplid"].Ready == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("vanished warm sandbox not replaced: live %v", ids)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFailingBootsBackOff(t *testing.T) {
	f := newFake()
	f.createErr = errors.New("runc exploded")
	p, _ := newTestPool(t, f, 2, 0)
	p.cfg.Interval = 5 * time.Millisecond
	run(t, p)
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		fl := p.failures[key{"tplid", "/t/v1", "", 2, 1024, 1024, ""}]
		p.mu.Unlock()
		if fl.n >= 1 {
			if fl.wait != retryMin {
				t.Fatalf("first retry delay %v, want %v", fl.wait, retryMin)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("failed boot not recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // ~40 refill rounds, all inside the 2 s delay
	p.mu.Lock()
	n := p.failures[key{"tplid", "/t/v1", "", 2, 1024, 1024, ""}].n
	p.mu.Unlock()
	if n != 1 {
		t.Fatalf("boots attempted during the back-off: %d failures, want 1", n)
	}
	if d := p.backoff(key{TemplateID: "x"}); d != retryMin {
		t.Fatalf("backoff of a fresh key = %v", d)
	}
	for range 30 {
		p.backoff(key{TemplateID: "x"})
	}
	if d := p.backoff(key{TemplateID: "x"}); d != retryMax {
		t.Fatalf("backoff after many failures = %v, want %v", d, retryMax)
	}
}

func TestParseTarget(t *testing.T) {
	if got, err := ParseTarget(" code-interpreter = 20 "); err != nil || got != (Target{"code-interpreter", 20}) {
		t.Fatalf("ParseTarget = %+v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "=3", "x=-1", "x=a"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q) accepted", bad)
		}
	}
}
