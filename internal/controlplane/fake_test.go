package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/secretbox"
	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/telemetry"
	"github.com/cubby-dev/cubby/internal/template"
)

// fakeBackend is a test-only, in-memory backend.Backend (a mock: real sandboxes
// need runc and root, which the handler tests do not exercise).
type fakeBackend struct {
	mu        sync.Mutex
	instances map[string]*backend.Instance
	creates   []backend.CreateRequest
	createErr error                            // returned by Create when set
	noPause   bool                             // Pause/Resume return ErrNotSupported
	pauseErr  func(backend.PauseOptions) error // when set and non-nil, Pause fails with it (sandbox keeps running)
	resumeErr error                            // returned by Resume when set (sandbox stays paused)
	pauses    []backend.PauseOptions
	resumes   int // successful Resume calls
	nextIP    int
	logLines  []backend.LogLine // returned by Logs for every sandbox
	reinits   map[string][]agentapi.InitRequest
	killCtx   []error                   // ctx.Err() seen by each Kill
	egress    map[string]*policy.Policy // last SetEgress per sandbox
	snapshots map[string]bool           // snapshot ID -> deleted
	volumes   map[string]string         // volume ID -> its files (a temporary directory)
	volUsers  map[string][]string       // sandbox ID -> volume IDs it mounts
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{instances: map[string]*backend.Instance{}, nextIP: 2, snapshots: map[string]bool{},
		volumes: map[string]string{}, volUsers: map[string][]string{}}
}

func (f *fakeBackend) Create(_ context.Context, req backend.CreateRequest) (backend.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, req)
	if f.createErr != nil {
		return backend.Instance{}, f.createErr
	}
	if deleted, ok := f.snapshots[req.Snapshot]; req.Snapshot != "" && (!ok || deleted) {
		return backend.Instance{}, backend.ErrSnapshotNotFound
	}
	in := &backend.Instance{
		SandboxID: req.SandboxID, Addr: netip.AddrFrom4([4]byte{10, 77, byte(f.nextIP >> 8), byte(f.nextIP)}),
		HostIface: fmt.Sprintf("fake%d", f.nextIP), Runtime: "fake", StartedAt: time.Now(),
	}
	for _, v := range req.Volumes {
		if _, ok := f.volumes[v.ID]; !ok {
			return backend.Instance{}, backend.ErrVolumeNotFound
		}
		f.volUsers[req.SandboxID] = append(f.volUsers[req.SandboxID], v.ID)
	}
	f.nextIP++
	f.instances[req.SandboxID] = in
	return *in, nil
}

func (f *fakeBackend) Kill(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killCtx = append(f.killCtx, ctx.Err())
	delete(f.instances, id)
	return nil
}

// Pause records opts and reports the mode a runc backend would choose:
// memory when kept, filesystem otherwise.
func (f *fakeBackend) Pause(_ context.Context, id string, opts backend.PauseOptions) (backend.PauseMode, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses = append(f.pauses, opts)
	if f.noPause {
		return "", backend.ErrNotSupported
	}
	in, ok := f.instances[id]
	switch {
	case !ok:
		return "", backend.ErrNotFound
	case in.Paused:
		return "", backend.ErrPaused
	}
	if f.pauseErr != nil {
		if err := f.pauseErr(opts); err != nil {
			return "", err
		}
	}
	in.Paused, in.PauseMode = true, backend.PauseMemory
	if !opts.KeepMemory {
		in.PauseMode = backend.PauseFilesystem
	}
	return in.PauseMode, nil
}

func (f *fakeBackend) Resume(_ context.Context, id string) (backend.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noPause {
		return backend.Instance{}, backend.ErrNotSupported
	}
	in, ok := f.instances[id]
	switch {
	case !ok:
		return backend.Instance{}, backend.ErrNotFound
	case !in.Paused:
		return backend.Instance{}, backend.ErrNotPaused
	case f.resumeErr != nil:
		return backend.Instance{}, f.resumeErr
	}
	in.Paused, in.PauseMode = false, ""
	f.resumes++
	return *in, nil
}

func (f *fakeBackend) Reinit(_ context.Context, id string, init agentapi.InitRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.instances[id]
	switch {
	case !ok:
		return backend.ErrNotFound
	case in.Paused:
		return backend.ErrPaused
	}
	if f.reinits == nil {
		f.reinits = map[string][]agentapi.InitRequest{}
	}
	f.reinits[id] = append(f.reinits[id], init)
	return nil
}

func (f *fakeBackend) SetInternetAccess(_ context.Context, id string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.instances[id]; !ok {
		return backend.ErrNotFound
	}
	return nil
}

// testSealer seals with a fixed test key.
func testSealer(t testing.TB) Sealer {
	b, err := secretbox.New(bytes.Repeat([]byte{7}, secretbox.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *fakeBackend) SetEgress(_ context.Context, id string, p *policy.Policy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.instances[id]; !ok {
		return backend.ErrNotFound
	}
	if f.egress == nil {
		f.egress = map[string]*policy.Policy{}
	}
	f.egress[id] = p
	return nil
}

func (f *fakeBackend) lastPause() backend.PauseOptions {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pauses[len(f.pauses)-1]
}

func (f *fakeBackend) Lookup(_ context.Context, id string) (backend.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.instances[id]
	if !ok {
		return backend.Instance{}, backend.ErrNotFound
	}
	return *in, nil
}

func (f *fakeBackend) Stats(_ context.Context, id string) (backend.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.instances[id]; !ok {
		return backend.Stats{}, backend.ErrNotFound
	}
	return backend.Stats{Timestamp: time.Now(), CPUCount: 2, CPUUsedPct: 12.5, MemUsed: 1 << 20,
		MemTotal: 512 << 20, MemCache: 4096, DiskUsed: 8192, DiskTotal: 1 << 30}, nil
}

// Recover keeps the known instances it has and drops every other one.
func (f *fakeBackend) Recover(_ context.Context, known []string) ([]backend.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := map[string]*backend.Instance{}
	var out []backend.Instance
	for _, id := range known {
		if in, ok := f.instances[id]; ok {
			keep[id] = in
			out = append(out, *in)
		}
	}
	f.instances = keep
	return out, nil
}

func (f *fakeBackend) Close() error { return nil }

func (f *fakeBackend) Snapshot(_ context.Context, id, snapID string) (backend.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, ok := f.instances[id]
	switch {
	case !ok:
		return backend.Snapshot{}, backend.ErrNotFound
	case in.Paused:
		return backend.Snapshot{}, backend.ErrPaused
	}
	f.snapshots[snapID] = false
	return backend.Snapshot{ID: snapID, Mode: backend.SnapshotFilesystem, SizeBytes: 4096}, nil
}

func (f *fakeBackend) DeleteSnapshot(_ context.Context, snapID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.snapshots[snapID]; ok {
		f.snapshots[snapID] = true
	}
	return nil
}

func (f *fakeBackend) CreateVolume(_ context.Context, id string, _ int64) error {
	dir, err := os.MkdirTemp("", "fakevol-")
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.volumes[id] = dir
	return nil
}

func (f *fakeBackend) DeleteVolume(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sb, vols := range f.volUsers {
		if _, live := f.instances[sb]; live && slices.Contains(vols, id) {
			return backend.ErrVolumeInUse
		}
	}
	if dir, ok := f.volumes[id]; ok {
		delete(f.volumes, id)
		return os.RemoveAll(dir)
	}
	return nil
}

func (f *fakeBackend) OpenVolume(_ context.Context, id string) (*os.Root, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dir, ok := f.volumes[id]
	if !ok {
		return nil, backend.ErrVolumeNotFound
	}
	return os.OpenRoot(dir)
}

func (f *fakeBackend) PruneVolumes(ctx context.Context, known []string) error {
	for id := range f.volumes {
		if !slices.Contains(known, id) {
			_ = f.DeleteVolume(ctx, id)
		}
	}
	return nil
}

func (f *fakeBackend) PruneSnapshots(_ context.Context, known []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := map[string]bool{}
	for _, id := range known {
		keep[id] = true
	}
	for id := range f.snapshots {
		if !keep[id] {
			f.snapshots[id] = true
		}
	}
	return nil
}

// Logs returns the lines set in logLines for id (as the local backend would
// after reading agent.log), filtered by since and limit the same way.
func (f *fakeBackend) Logs(_ context.Context, id string, since time.Time, limit int) ([]backend.LogLine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.instances[id]; !ok {
		return nil, backend.ErrNotFound
	}
	out := []backend.LogLine{}
	for _, l := range f.logLines {
		if since.IsZero() || !l.Timestamp.Before(since) {
			out = append(out, l)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}

func (f *fakeBackend) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.instances[id]
	return ok
}

// ids returns the IDs of the sandboxes the fake runs.
func (f *fakeBackend) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id := range f.instances {
		out = append(out, id)
	}
	return out
}

func (f *fakeBackend) lastCreate() backend.CreateRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates[len(f.creates)-1]
}

// harnessTemplates are the templates of the harness: the resolver production
// uses (BuiltTemplates) over two built templates.
var harnessTemplates = BuiltTemplates{Source: builtTemplates{
	{ID: "tplbase1", Name: "base", Aliases: []string{"base", "base-alias"}, RootfsDir: "/rootfs/base", BuiltAt: time.Now()},
	{ID: "tplci1", Name: "code-interpreter-v1", Aliases: []string{"code-interpreter-v1"}, RootfsDir: "/rootfs/ci", BuiltAt: time.Now()},
}}

// builtTemplates is a TemplateSource over fixed builds, one per template,
// looked up as template.Manager looks them up (ID or alias, ":tag" ignored);
// every build has the log "<id>/b1" of two lines.
type builtTemplates []template.Info

func (b builtTemplates) Get(ref string) (template.Info, error) {
	name, _, _ := strings.Cut(ref, ":")
	for _, i := range b {
		if i.ID == name || slices.Contains(i.Aliases, name) {
			return i, nil
		}
	}
	return template.Info{}, fmt.Errorf("template %q: %w", ref, template.ErrNotFound)
}

func (b builtTemplates) List() ([]template.Info, error) { return b, nil }

func (b builtTemplates) BuildLog(ref, buildID string) ([]template.BuildLogEntry, error) {
	if _, err := b.Get(ref); err != nil || buildID != "b1" {
		return nil, fmt.Errorf("%s/%s: %w", ref, buildID, template.ErrNotFound)
	}
	return []template.BuildLogEntry{{Time: time.Unix(1, 0), Level: "info", Message: "built " + ref}, {Time: time.Unix(2, 0), Level: "error", Message: "oops"}}, nil
}

// withTestDefaults gives cfg the harness's default template ("base"), CPU
// count (2) and memory limit (512 MiB) unless it has its own (the server
// passes its own).
func withTestDefaults(cfg Config) Config {
	if cfg.DefaultTemplate == "" {
		cfg.DefaultTemplate = "base"
	}
	if cfg.DefaultCPU == 0 {
		cfg.DefaultCPU = 2
	}
	if cfg.DefaultMemoryMB == 0 {
		cfg.DefaultMemoryMB = 512
	}
	return cfg
}

// harness is a Service on a fresh store and fake backend behind an httptest server.
type harness struct {
	t       testing.TB
	svc     *Service
	store   *store.Store
	fake    *fakeBackend
	srv     *httptest.Server
	key     string
	dbPath  string
	killed  chan string
	cfg     Config
	stopped bool
	metrics *telemetry.Metrics // passed as Deps.Metrics when set before start
	// Set before start to replace harnessTemplates and serve the template API.
	resolver TemplateResolver
	tstore   TemplateStore
	builds   TemplateBuilds
	// wrap, when set before start, is the backend the Service gets in place
	// of fake (a wrapper adding an optional interface).
	wrap func(*fakeBackend) backend.Backend
}

func newHarness(t testing.TB, cfg Config) *harness {
	t.Helper()
	dbPath := filepath.Join(t.TempDir(), "cubby.db")
	st, err := store.Open(context.Background(), dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h := &harness{t: t, store: st, fake: newFakeBackend(), dbPath: dbPath, cfg: withTestDefaults(cfg)}
	h.start()
	key, created, err := h.svc.EnsureAPIKey(context.Background())
	if err != nil || !created {
		t.Fatalf("EnsureAPIKey = %q, %v, %v", key, created, err)
	}
	h.key = key
	return h
}

// start builds and starts a new Service on the harness's store and backend.
func (h *harness) start() {
	h.t.Helper()
	h.killed = make(chan string, 100)
	killed := h.killed
	var resolver TemplateResolver = harnessTemplates
	if h.resolver != nil {
		resolver = h.resolver
	}
	var be backend.Backend = h.fake
	if h.wrap != nil {
		be = h.wrap(h.fake)
	}
	svc, err := New(h.cfg, Deps{
		Store: h.store, Backend: be, Templates: resolver,
		OnKill:        func(id string) { killed <- id },
		Metrics:       h.metrics,
		Sealer:        testSealer(h.t),
		TemplateStore: h.tstore, Builds: h.builds,
	})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := svc.Start(context.Background()); err != nil {
		h.t.Fatal(err)
	}
	h.svc = svc
	h.srv = httptest.NewServer(svc.Handler())
	h.stopped = false
	h.t.Cleanup(h.stop)
}

// stop shuts the current Service down (sandboxes stay in the fake backend).
func (h *harness) stop() {
	if h.stopped {
		return
	}
	h.stopped = true
	h.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.svc.Shutdown(ctx); err != nil {
		h.t.Errorf("shutdown: %v", err)
	}
}

// response is a decoded HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// do sends a request with the harness's API key.
func (h *harness) do(method, path string, body any) response {
	h.t.Helper()
	return h.doKey(h.key, method, path, body)
}

func (h *harness) doKey(key, method, path string, body any) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, h.srv.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	resp, err := h.srv.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// wantError asserts a JSON error body {"code":status,"message":non-empty}.
func wantError(t *testing.T, r response, status int) string {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error content type = %q", ct)
	}
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	r.json(t, &e)
	if e.Code == nil || *e.Code != status || e.Message == nil || *e.Message == "" {
		t.Fatalf("error body = %s, want code %d and a message", r.body, status)
	}
	return *e.Message
}

// create makes a sandbox through POST /v2/sandboxes and returns its ID.
func (h *harness) create(body map[string]any) string {
	h.t.Helper()
	return h.createAs(h.key, body)
}

// createAs is create with API key key.
func (h *harness) createAs(key string, body map[string]any) string {
	h.t.Helper()
	r := h.doKey(key, "POST", "/v2/sandboxes", body)
	if r.status != http.StatusCreated {
		h.t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb struct {
		SandboxID string `json:"sandboxID"`
	}
	r.json(h.t, &sb)
	return sb.SandboxID
}

// waitState waits (bounded) until the store records id in state; OnKill fires
// before a kill is recorded.
func (h *harness) waitState(id string, state store.State) store.Sandbox {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec := h.record(id)
		if rec.State == state {
			return rec
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("sandbox %s is %s, want %s", id, rec.State, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitKilled waits (bounded) for OnKill to report id.
func (h *harness) waitKilled(id string, within time.Duration) time.Time {
	h.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case got := <-h.killed:
			if got == id {
				return time.Now()
			}
		case <-deadline:
			h.t.Fatalf("sandbox %s was not killed within %v", id, within)
		}
	}
}

func (h *harness) record(id string) store.Sandbox {
	h.t.Helper()
	r, err := h.store.GetSandbox(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func str(v string) *string { return &v }
