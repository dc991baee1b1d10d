// Package controlplane implements Cubby's control plane: the E2B-compatible REST
// API (docs/wire/e2b-api.md §2) over a backend.Backend, sandbox records and
// API keys in the SQLite store, per-sandbox TTL timers, resource-metric sampling,
// recovery after a restart, and the in-memory routing table the sandbox gateway
// reads.
package controlplane

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/admission"
	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/outbound"
	"github.com/cubby-dev/cubby/internal/pool"
	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/telemetry"
)

// Config tunes the control plane. Zero fields take the documented defaults;
// DefaultTemplate, DefaultCPU and DefaultMemoryMB have none here: the server
// passes its own (package server owns them).
type Config struct {
	// DefaultTemplate is used when a create request names no template.
	// Required with a Backend.
	DefaultTemplate string
	// Domain is returned as the sandbox `domain` (docs/wire/e2b-api.md §1.2) when non-empty;
	// otherwise `domain` is null and the SDKs use E2B_DOMAIN.
	Domain string
	// MaxTimeout bounds every sandbox TTL (create, timeout, connect). Default 24h.
	MaxTimeout time.Duration
	// DefaultCPU is the CPU count of new sandboxes. Required with a Backend.
	DefaultCPU int
	// DefaultMemoryMB is the memory limit of new sandboxes in MiB. Required
	// with a Backend.
	DefaultMemoryMB int
	// DefaultDiskMB is the writable-layer size of new sandboxes in MiB. Default 1024.
	DefaultDiskMB int
	// EnvAPIKey (CUBBY_API_KEY) is accepted as an API key in addition to the
	// stored keys when non-empty.
	EnvAPIKey string
	// MetricsInterval is the period of the resource sampler. Default 5s.
	MetricsInterval time.Duration
	// Boot are the code-interpreter boot options every sandbox's agent starts
	// with (default contexts, Python preload); zero = the agent's defaults.
	Boot agentapi.BootOptions
	// Pool lists the warm pools to keep (template and size); empty = every
	// create boots a sandbox. See package pool.
	Pool []pool.Target
	// PoolMemoryBudget caps the memory (bytes) held by warm sandboxes; 0 = a
	// quarter of the host's RAM.
	PoolMemoryBudget uint64
	// DefaultVolumeMB is the size (quota) of a volume created without
	// `sizeMB`, in MiB. Default 1024.
	DefaultVolumeMB int
	// Admission limits creates (and warm-pool claims) per team and server-wide;
	// a refused create is a 429. Zero fields are no limit.
	Admission admission.Limits
	// Outbound, when set, is passed to every sandbox: the CA bundle is mounted
	// at agentapi.CABundlePath and named by the CA variables, the proxy
	// variables join its environment. Zero = nothing (the operator's choice).
	Outbound outbound.Settings
}

func (c *Config) defaults() {
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = 24 * time.Hour
	}
	if c.DefaultDiskMB <= 0 {
		c.DefaultDiskMB = 1024
	}
	if c.DefaultVolumeMB <= 0 {
		c.DefaultVolumeMB = 1024
	}
	if c.MetricsInterval <= 0 {
		c.MetricsInterval = 5 * time.Second
	}
}

// Deps are the components the control plane drives.
type Deps struct {
	// Store persists records and keys. Required.
	Store Store
	// Backend runs sandboxes. Required by Start and the sandbox routes; a Service
	// built without one can only manage API keys.
	Backend backend.Backend
	// Templates resolves template IDs and aliases. Required by create and list.
	Templates TemplateResolver
	// OnKill, when set, is called right after a sandbox was killed or paused so
	// the gateway can cut its open connections. It must not block for long.
	OnKill func(id string)
	// Log receives operational logs; nil discards them.
	Log *slog.Logger
	// Metrics receives create latencies and kills (Prometheus); nil records nothing.
	Metrics *telemetry.Metrics
	// Sealer encrypts secrets and network credentials at rest; nil = the
	// /secrets routes answer 501 and no egress proxy password is accepted.
	Sealer Sealer
	// TemplateStore and Builds serve the template build API; without them
	// its routes answer 503.
	TemplateStore TemplateStore
	Builds        TemplateBuilds
	// KeepSnapshots, when set, lists backend snapshots the store does not
	// record that the start-up prune must keep (templates' ready snapshots).
	KeepSnapshots func(ctx context.Context) ([]string, error)
	// PruneTemplates, when set, is called after a template was deleted to
	// remove what no template and no sandbox uses any more; it must not block.
	PruneTemplates func()
	// Pool, when set, is the warm pool creates claim from instead of one built
	// from Config.Pool (the kubernetes backend's pool of labelled Pods). With a
	// shared backend its Run is called only while this replica leads (Lead).
	Pool WarmPool
	// Health, when set, is asked before every create: an error (the store or
	// the backend cannot be reached) makes the create answer 503 with its text.
	Health func() error
}

// WarmPool hands booted sandboxes to creates (package pool's Pool, the
// kubernetes backend's Pod pool).
type WarmPool interface {
	// Claim hands a warm sandbox matching req to a create, configured with
	// req.Init and req.NoInternet, under its own ID; ok is false when none matches.
	Claim(ctx context.Context, req backend.CreateRequest) (in backend.Instance, ok bool)
	// Run refills the pool until ctx ends.
	Run(ctx context.Context)
}

// Service is the control plane. Its methods are safe for concurrent use.
type Service struct {
	cfg       Config
	store     Store
	backend   backend.Backend
	templates TemplateResolver
	onKill    func(id string)
	log       *slog.Logger
	metrics   *telemetry.Metrics
	ringSize  int
	pool      WarmPool      // nil without Config.Pool or Deps.Pool
	shared    sharedBackend // non-nil when the backend is shared by replicas
	health    func() error
	admit     *admission.Controller
	sealer    Sealer // nil without Deps.Sealer

	mu      sync.RWMutex
	live    map[string]*sandbox // running and paused sandboxes
	leading bool                // TTLs are armed: always on one server, while leading in a cluster
	// creating holds the IDs of creates in flight here, which events and
	// lookups must not adopt from the store half-made.
	creating map[string]struct{}
	started  bool
	closed   bool
	wg       sync.WaitGroup     // sampler and expiry callbacks
	bg       context.Context    // cancelled by Shutdown
	cancel   context.CancelFunc // cancels bg

	touchMu   sync.Mutex
	lastTouch map[string]time.Time // API key ID -> last recorded use

	snapMu   sync.Mutex
	lastSnap time.Time // creation time of the last snapshot stamped (snapshotTime)

	tstore         TemplateStore
	builds         TemplateBuilds
	pruneTemplates func()
	keepSnapshots  func(ctx context.Context) ([]string, error)
	uploadKey      []byte   // signs upload URLs (random per process)
	idem           inflight // creates with an Idempotency-Key under way
}

// metricsRetention is how much sample history each sandbox keeps in memory.
const metricsRetention = time.Hour

// New builds a control plane from cfg and deps. It starts nothing: call Start to
// recover sandboxes, arm TTLs and start the sampler. Errors: a missing Store;
// a Backend without Config.DefaultTemplate, DefaultCPU and DefaultMemoryMB.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.Store == nil {
		return nil, errors.New("controlplane: a store is required")
	}
	if deps.Backend != nil && (cfg.DefaultTemplate == "" || cfg.DefaultCPU <= 0 || cfg.DefaultMemoryMB <= 0) {
		return nil, errors.New("controlplane: a backend needs Config.DefaultTemplate, DefaultCPU and DefaultMemoryMB")
	}
	cfg.defaults()
	log := deps.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	bg, cancel := context.WithCancel(context.Background())
	ring := int(metricsRetention / cfg.MetricsInterval)
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		cancel()
		return nil, fmt.Errorf("controlplane: upload key: %w", err)
	}
	shared, _ := deps.Backend.(sharedBackend)
	return &Service{
		cfg: cfg, store: deps.Store, backend: deps.Backend, templates: deps.Templates,
		onKill: deps.OnKill, log: log, metrics: deps.Metrics, ringSize: min(max(ring, 16), 4096),
		live: map[string]*sandbox{}, bg: bg, cancel: cancel, lastTouch: map[string]time.Time{},
		admit: admission.New(cfg.Admission), sealer: deps.Sealer,
		tstore: deps.TemplateStore, builds: deps.Builds, pruneTemplates: deps.PruneTemplates, uploadKey: key,
		keepSnapshots: deps.KeepSnapshots,
		pool:          deps.Pool, shared: shared, health: deps.Health,
		leading: shared == nil, creating: map[string]struct{}{},
	}, nil
}

// Start recovers after a (possibly unclean) restart: it loads the sandboxes the
// store says are running or paused, asks the backend to re-adopt them
// (backend.Recover), marks the others killed with reason "lost across restart",
// re-arms their TTLs (killing or pausing those already past their deadline before
// returning) and starts the metrics sampler. It may be called once.
//
// With a shared backend (one replica of several) it first subscribes to the
// backend's events, adopts the sandboxes other replicas run, and leaves TTLs
// and the warm pool to Lead; a record without a sandbox is marked killed only
// once it is older than a create can take.
func (s *Service) Start(ctx context.Context) error {
	if s.backend == nil || s.templates == nil {
		return errors.New("controlplane: start needs a backend and a template resolver")
	}
	s.mu.Lock()
	if s.started || s.closed {
		s.mu.Unlock()
		return errors.New("controlplane: already started or shut down")
	}
	s.started = true
	s.mu.Unlock()
	if s.shared != nil {
		s.shared.Subscribe(s.onEvent)
	}
	if err := s.recover(ctx); err != nil {
		return err
	}
	if err := s.pruneSnapshots(ctx); err != nil {
		s.log.Error("prune snapshots", "err", err)
	}
	if err := s.pruneVolumes(ctx); err != nil {
		s.log.Error("prune volumes", "err", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.wg.Add(1)
	go s.sampleLoop()
	if s.shared != nil {
		return nil // the pool runs while leading
	}
	if s.pool == nil && len(s.cfg.Pool) > 0 {
		s.pool = pool.New(pool.Config{
			Backend: s.backend, Targets: s.cfg.Pool, Resolve: s.PoolRequest, NewID: sandboxid.New,
			MemoryBudget: s.cfg.PoolMemoryBudget, Log: s.log.With("component", "pool"), Metrics: s.metrics,
		})
	}
	if s.pool != nil {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.pool.Run(s.bg)
		}()
	}
	return nil
}

// Shutdown stops TTL timers and the sampler, kills the warm pool's sandboxes
// and waits (until ctx is done) for expiry work in flight. Sandboxes keep
// running; the next Start re-adopts them.
func (s *Service) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for _, sb := range s.live {
		if sb.timer != nil {
			sb.timer.Stop()
			sb.timer = nil
		}
	}
	s.mu.Unlock()
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("controlplane shutdown: %w", ctx.Err())
	}
}

// enter registers background work unless the service is shut down.
func (s *Service) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// recover implements the restart half of Start.
func (s *Service) recover(ctx context.Context) error {
	recs, err := s.store.ListSandboxes(ctx, store.SandboxFilter{States: []store.State{store.StateRunning, store.StatePaused}})
	if err != nil {
		return fmt.Errorf("recover: %w", err)
	}
	ids := make([]string, 0, len(recs))
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	insts, err := s.backend.Recover(ctx, ids)
	if err != nil {
		return fmt.Errorf("recover: backend: %w", err)
	}
	byID := make(map[string]backend.Instance, len(insts))
	for _, in := range insts {
		byID[in.SandboxID] = in
	}
	var due []*sandbox
	adopted, lost := 0, 0
	for _, r := range recs {
		in, ok := byID[r.ID]
		if !ok {
			marked, err := s.markLost(ctx, r)
			if err != nil {
				return fmt.Errorf("recover: %w", err)
			}
			lost += marked
			continue
		}
		sb, err := s.adopt(ctx, r, in)
		if err != nil {
			return fmt.Errorf("recover: %w", err)
		}
		if sb == nil {
			continue // being created here
		}
		adopted++
		s.rekey(ctx, r, in)
		if !in.Paused && !time.Now().Before(r.EndAt) {
			due = append(due, sb) // the timer fires at once too; expire is idempotent
		}
	}
	if lost > 0 {
		s.dropKilledSecrets(ctx)
	}
	for _, sb := range due {
		s.expire(sb)
	}
	s.log.Debug("reconciled sandboxes with the backend", "adopted", adopted, "lost", lost)
	return nil
}

// rekey re-keys the agent of running sandbox r when the backend says an
// older release initialised it with the clients' token (rekeyer); a failure
// is logged and tried again at the next reconcile.
func (s *Service) rekey(ctx context.Context, r store.Sandbox, in backend.Instance) {
	rk, ok := s.backend.(rekeyer)
	if !ok || in.Paused {
		return
	}
	if _, err := rk.Rekey(ctx, r.ID, r.AccessToken); err != nil && ctx.Err() == nil {
		s.log.Warn("re-key the agent of a sandbox an older release started", "sandbox", r.ID, "err", err)
	}
}

// markLost records r killed because the backend does not run it and returns
// 1, or 0 when it is left alone: with a shared backend a record younger than
// a create may be one in flight on another replica, and one already killed
// there counts as done.
func (s *Service) markLost(ctx context.Context, r store.Sandbox) (int, error) {
	reason, label := reasonLost, killLabelLost
	if s.shared != nil {
		if time.Since(r.StartedAt) < createTimeout {
			return 0, nil
		}
		reason, label = s.goneReason(ctx, r.ID), killLabelGone
	}
	s.log.Warn("sandbox lost", "sandbox", r.ID, "reason", reason)
	err := s.store.MarkKilled(ctx, r.ID, time.Now(), reason)
	if s.shared != nil && errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	s.metrics.SandboxKilled(label)
	return 1, nil
}

// adopt reconciles one surviving sandbox's record with the backend's view and
// registers it (with its TTL armed when running).
func (s *Service) adopt(ctx context.Context, r store.Sandbox, in backend.Instance) (*sandbox, error) {
	if s.shared != nil {
		if sb, busy := s.known(r.ID); sb != nil || busy {
			s.refreshDeadline(sb, r.EndAt)
			return sb, nil
		}
	}
	switch {
	case in.Paused && r.State == store.StateRunning:
		if err := s.store.MarkPaused(ctx, r.ID); err != nil {
			return nil, err
		}
	case !in.Paused && r.State == store.StatePaused:
		if err := s.store.MarkResumed(ctx, r.ID, in.Addr, r.EndAt); err != nil {
			return nil, err
		}
	}
	if in.Addr != r.Addr || (in.Runtime != "" && in.Runtime != r.Runtime) {
		if err := s.store.SetAddr(ctx, r.ID, in.Addr, in.Runtime); err != nil {
			return nil, err
		}
	}
	sb := s.registerNew(r, in)
	if sb != nil {
		s.restoreEgress(ctx, r)
	}
	return sb, nil
}
