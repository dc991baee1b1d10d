package pool

import (
	"context"
	"errors"
	"net/netip"
	"sync"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/egress/policy"
)

// The backends a Pool runs on: the real ones and the fake.
var (
	_ Backend = backend.Backend(nil)
	_ Backend = (*fakeBackend)(nil)
)

// fakeBackend is a test-only, in-memory Backend (a mock: the real local
// backend needs root and runc; test/integration drives the pool through a
// real server).
type fakeBackend struct {
	mu        sync.Mutex
	live      map[string]backend.CreateRequest
	inits     map[string]agentapi.InitRequest
	memUsed   uint64
	failInit  map[string]bool // Reinit fails for these IDs
	blocked   map[string]bool // internet access blocked
	egress    map[string]*policy.Policy
	createErr error
}

func newFake() *fakeBackend {
	return &fakeBackend{live: map[string]backend.CreateRequest{}, inits: map[string]agentapi.InitRequest{},
		failInit: map[string]bool{}, blocked: map[string]bool{}, memUsed: 100 << 20}
}

func (f *fakeBackend) Create(_ context.Context, req backend.CreateRequest) (backend.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.createErr != nil {
		return backend.Instance{}, f.createErr
	}
	f.live[req.SandboxID] = req
	f.inits[req.SandboxID] = req.Init
	return backend.Instance{SandboxID: req.SandboxID, Addr: netip.MustParseAddr("10.0.0.2"), Runtime: "fake"}, nil
}

func (f *fakeBackend) Kill(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.live, id)
	return nil
}

func (f *fakeBackend) Reinit(_ context.Context, id string, init agentapi.InitRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.live[id]; !ok {
		return backend.ErrNotFound
	}
	if f.failInit[id] {
		return errors.New("agent refused init")
	}
	f.inits[id] = init
	return nil
}

func (f *fakeBackend) SetInternetAccess(_ context.Context, id string, allowed bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.live[id]; !ok {
		return backend.ErrNotFound
	}
	f.blocked[id] = !allowed
	return nil
}

func (f *fakeBackend) SetEgress(_ context.Context, id string, p *policy.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.live[id]; !ok {
		return backend.ErrNotFound
	}
	if f.egress == nil {
		f.egress = map[string]*policy.Policy{}
	}
	f.egress[id] = p
	return nil
}

func (f *fakeBackend) Stats(_ context.Context, id string) (backend.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.live[id]; !ok {
		return backend.Stats{}, backend.ErrNotFound
	}
	return backend.Stats{MemUsed: f.memUsed}, nil
}

func (f *fakeBackend) liveIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for id := range f.live {
		ids = append(ids, id)
	}
	return ids
}
