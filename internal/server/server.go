// Package server assembles `cubby serve`: the SQLite store, templates, the local
// backend (runc, overlay rootfs, per-sandbox netns), the control plane (E2B REST
// API) and the sandbox gateway, all on one listener.
//
// GET /metrics on that listener serves the server's Prometheus metrics (package
// telemetry) without an API key, as scrapers expect; it reveals counts and
// latencies, not sandbox IDs or secrets. Bind the listener to a trusted address
// (the default is 127.0.0.1) or filter /metrics in a front proxy when the API is
// public.
package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cubby-dev/cubby/internal/admission"
	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/apikey"
	"github.com/cubby-dev/cubby/internal/backend/local"
	"github.com/cubby-dev/cubby/internal/builds"
	"github.com/cubby-dev/cubby/internal/controlplane"
	"github.com/cubby-dev/cubby/internal/dashboard"
	"github.com/cubby-dev/cubby/internal/egress"
	"github.com/cubby-dev/cubby/internal/egress/proxy"
	"github.com/cubby-dev/cubby/internal/gateway"
	"github.com/cubby-dev/cubby/internal/image"
	"github.com/cubby-dev/cubby/internal/mcpserver"
	"github.com/cubby-dev/cubby/internal/meminfo"
	"github.com/cubby-dev/cubby/internal/network"
	"github.com/cubby-dev/cubby/internal/outbound"
	"github.com/cubby-dev/cubby/internal/pool"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
	"github.com/cubby-dev/cubby/internal/runtime/runc"
	"github.com/cubby-dev/cubby/internal/runtime/runsc"
	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/telemetry"
	"github.com/cubby-dev/cubby/internal/template"
	"github.com/cubby-dev/cubby/internal/userns"
	"github.com/cubby-dev/cubby/sdk"
)

// Config configures `cubby serve`. Zero fields take the defaults of
// Defaults (Run and NewStandalone apply them; `cubby serve`'s flags start
// from them); the comments name the defaults derived from other fields or
// measured on the host.
type Config struct {
	Listen       string // address of the API and the gateway; default DefaultListen
	DataDir      string // holds cubby.db, templates/, sandboxes/, runc/; default DefaultDataDir
	TemplatesDir string // built templates; default <DataDir>/templates (may be shared between servers)
	RunDir       string // sandboxes' rootfs mount points, reachable by their mapped roots; default DefaultRunDir(DataDir)
	// DisableUserns runs sandboxes in the host's user namespace (root inside
	// is host root: `--userns=false`); by default each new sandbox gets its
	// own user namespace and host id range.
	DisableUserns   bool
	Domain          string               // sandbox domain (host[:port]) for <port>-<id>.<domain> hosts; "" = "localhost:<listen port>"
	Bridge          string               // portless host bridge holding the sandboxes' gateway address, default network.DefaultBridge
	Subnet          netip.Prefix         // sandbox addresses, default network.DefaultSubnet
	RuncBinary      string               // runc; default bin/runc next to cubby, else PATH
	RunscBinary     string               // gVisor runsc; default bin/runsc next to cubby, else PATH
	Runtime         string               // default runtime of new sandboxes: "runc" or "runsc"; default DefaultRuntime
	MemoryMB        int                  // memory limit of new sandboxes in MiB (a cap, not a reservation); default DefaultMemoryMB
	DefaultTemplate string               // template of creates that name none, built on first start; default DefaultTemplateName
	Boot            agentapi.BootOptions // code-interpreter boot options passed to every sandbox's agent
	Pool            []pool.Target        // warm pools (template, size); none by default
	PoolMemoryMB    int                  // memory budget of the warm pools in MiB; 0 = a quarter of the host's RAM
	EnvAPIKey       string               // CUBBY_API_KEY; accepted (for the default team) when set
	Version         string               // cubby release, reported by the MCP server
	Progress        io.Writer            // template build progress and the first API key; default os.Stderr
	// RegistryMirror serves Docker Hub image references of template builds
	// ("host:port" or "http://host:port"); "" = Docker Hub.
	RegistryMirror string
	// OutboundCA is the CA bundle build steps trust: "host", "none" or a PEM
	// path (default DefaultOutboundCA); the proxy variables of the server's
	// environment go along.
	OutboundCA string
	// SandboxOutbound passes the CA bundle and proxy variables to sandboxes too.
	SandboxOutbound bool
	// BuildConcurrency is how many template builds run at once; default
	// DefaultBuildConcurrency.
	BuildConcurrency int
	// TemplateGCAge: unused template trees, layers and cached steps this old
	// are removed; default DefaultTemplateGCAge.
	TemplateGCAge time.Duration
	// Admission are the per-team and server-wide limits on creates. A zero
	// TeamSandboxes, CreateRate or CreateBurst takes Defaults' value, a
	// negative one (NoLimit) is no limit; a zero TeamMemoryMB is no team
	// limit; a zero ServerMemoryMB becomes admission.DefaultServerMemoryMB of
	// the host's RAM.
	Admission admission.Limits
	// ReadHeaderTimeout bounds reading a request's headers on the listener;
	// default DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long; default
	// DefaultIdleTimeout. Neither timeout limits a request in progress
	// (executions, watch streams, PTYs and uploads run as long as they need).
	IdleTimeout time.Duration
	// EgressResolvers are the DNS resolvers of the egress proxy (its own
	// lookups and sandboxes' allowed queries); default /etc/resolv.conf's.
	EgressResolvers []netip.AddrPort
	// EgressUpstreamCA is a PEM file of extra roots the egress proxy trusts
	// for hosts whose HTTPS it re-encrypts; "" = the system roots only.
	EgressUpstreamCA string
	// Backend is BackendLocal (the default) or BackendKubernetes.
	Backend string
	// Store is the record store: "" = SQLite in DataDir; a postgres:// URL =
	// PostgreSQL, shared by replicas (required by BackendKubernetes).
	Store string
	// Kube configures BackendKubernetes.
	Kube KubeConfig
}

// Backends of `cubby serve --backend`.
const (
	BackendLocal      = "local"
	BackendKubernetes = "kubernetes"
)

// Defaults of Config (README's flag table).
const (
	// DefaultListen is the address of the API and the sandbox gateway.
	DefaultListen = "127.0.0.1:3000"
	// DefaultDataDir holds the database, templates and sandboxes.
	DefaultDataDir = "/var/lib/cubby"
	// DefaultRuntime is the OCI runtime of sandboxes whose template names none.
	DefaultRuntime = "runc"
	// DefaultCPUCount is the CPU count of new sandboxes and template builds
	// whose request names none.
	DefaultCPUCount = 2
	// DefaultMemoryMB is the memory limit of new sandboxes in MiB (a cap, not
	// a reservation): the default Python and JavaScript kernels of the
	// code-interpreter template use ~150 MiB.
	DefaultMemoryMB = 1024
	// DefaultTemplateName is the template of creates that name none.
	DefaultTemplateName = "base"
	// DefaultOutboundCA is the CA bundle build steps trust: the host's.
	DefaultOutboundCA = "host"
	// DefaultBuildConcurrency is how many template builds run at once.
	DefaultBuildConcurrency = 1
	// DefaultTemplateGCAge is how old unused template trees, layers and
	// cached build steps get before they are removed: a day, so a failed
	// build's cached steps serve the next attempt.
	DefaultTemplateGCAge = 24 * time.Hour
	// DefaultImagePullPolicy is the pull policy of sandbox images of the
	// kubernetes backend.
	DefaultImagePullPolicy = "IfNotPresent"
	// NoLimit, as an admission limit of Config.Admission, is no limit.
	NoLimit = -1
)

// Defaults returns the configuration a zero Config gets (before what is
// derived from other fields or measured on the host, see Config).
func Defaults() Config {
	return Config{
		Listen: DefaultListen, DataDir: DefaultDataDir, Bridge: network.DefaultBridge, Subnet: network.DefaultSubnet,
		Runtime: DefaultRuntime, MemoryMB: DefaultMemoryMB, DefaultTemplate: DefaultTemplateName,
		OutboundCA: DefaultOutboundCA, BuildConcurrency: DefaultBuildConcurrency, TemplateGCAge: DefaultTemplateGCAge,
		Admission: admission.Limits{TeamSandboxes: admission.DefaultTeamSandboxes,
			CreateRate: admission.DefaultCreateRate, CreateBurst: admission.DefaultCreateBurst},
		ReadHeaderTimeout: DefaultReadHeaderTimeout, IdleTimeout: DefaultIdleTimeout,
		Backend: BackendLocal, Kube: KubeConfig{ImagePullPolicy: DefaultImagePullPolicy},
	}
}

// Listener timeouts of `cubby serve` (README's flag table).
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes idle keep-alive connections; it is longer than
	// the idle-connection timeouts of the SDKs' HTTP clients (Go 90 s, Node 4 s,
	// httpx 5 s), so a client never reuses a connection the server is closing.
	DefaultIdleTimeout = 2 * time.Minute
)

// dataDirMode is the mode of the data directory: it holds the database,
// sandbox disks, memory checkpoints and runtime state.
const dataDirMode = 0o700

// defaults validates c and completes it: Defaults' values in its zero
// fields, then (local backend) what derives from them and is measured on the
// host; the data directory is made.
func (c *Config) defaults() error {
	c.applyDefaults()
	if c.Backend == BackendKubernetes {
		return c.clusterDefaults()
	}
	if c.Backend != BackendLocal {
		return fmt.Errorf("--backend %q: want %s or %s", c.Backend, BackendLocal, BackendKubernetes)
	}
	if c.Store != "" {
		return errors.New("--store: the local backend keeps its records in SQLite in --data-dir (PostgreSQL is for --backend kubernetes)")
	}
	if c.Progress == nil {
		c.Progress = os.Stderr
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return fmt.Errorf("resolve data dir: %w", err)
	}
	c.DataDir = abs
	if c.TemplatesDir == "" {
		c.TemplatesDir = filepath.Join(abs, "templates")
	}
	if c.RunDir == "" {
		c.RunDir = DefaultRunDir(abs)
	}
	if c.Admission.ServerMemoryMB == 0 {
		m, err := meminfo.Read()
		if err != nil {
			return fmt.Errorf("server memory cap: %w", err)
		}
		c.Admission.ServerMemoryMB = admission.DefaultServerMemoryMB(m.Total)
	}
	if err := os.MkdirAll(abs, dataDirMode); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	if err := os.Chmod(abs, dataDirMode); err != nil { // an existing one may be wider
		return fmt.Errorf("restrict data dir: %w", err)
	}
	return nil
}

// applyDefaults gives every zero field of c that Defaults sets its value
// (durations: every one not above zero); admission limits set to NoLimit
// become zero, package admission's "no limit".
func (c *Config) applyDefaults() {
	d := Defaults()
	orDefault(&c.Listen, d.Listen)
	orDefault(&c.DataDir, d.DataDir)
	orDefault(&c.Bridge, d.Bridge)
	orDefault(&c.Subnet, d.Subnet)
	orDefault(&c.Runtime, d.Runtime)
	orDefault(&c.MemoryMB, d.MemoryMB)
	orDefault(&c.DefaultTemplate, d.DefaultTemplate)
	orDefault(&c.OutboundCA, d.OutboundCA)
	orDefault(&c.BuildConcurrency, d.BuildConcurrency)
	orDefault(&c.Backend, d.Backend)
	orDefault(&c.Kube.ImagePullPolicy, d.Kube.ImagePullPolicy)
	for _, p := range []struct {
		v *time.Duration
		d time.Duration
	}{
		{&c.TemplateGCAge, d.TemplateGCAge}, {&c.ReadHeaderTimeout, d.ReadHeaderTimeout}, {&c.IdleTimeout, d.IdleTimeout},
	} {
		if *p.v <= 0 {
			*p.v = p.d
		}
	}
	a := &c.Admission
	orDefault(&a.TeamSandboxes, d.Admission.TeamSandboxes)
	orDefault(&a.CreateRate, d.Admission.CreateRate)
	orDefault(&a.CreateBurst, d.Admission.CreateBurst)
	a.TeamSandboxes, a.TeamMemoryMB, a.CreateRate = max(a.TeamSandboxes, 0), max(a.TeamMemoryMB, 0), max(a.CreateRate, 0)
}

// orDefault sets *v to d when it is the zero value.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// runRoot is the parent of every server's default run directory; like
// userns.DefaultLeaseDir it is shared by the servers of a host.
const runRoot = "/run/cubby"

// DefaultRunDir is the run directory of the server with data directory
// dataDir (absolute): /run/cubby/<first 16 hex digits of sha256(dataDir)>, so
// each data directory has its own, the same across restarts, outside the
// private data directory (its sandboxes' mapped roots must reach their rootfs).
func DefaultRunDir(dataDir string) string {
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(runRoot, hex.EncodeToString(sum[:8]))
}

// Run serves until ctx is done. /health answers 503 while starting (e.g. while the
// base template is built on first start) and 200 once the server is ready.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	if cfg.Domain == "" {
		cfg.Domain = defaultDomain(ln.Addr())
	}
	var ready atomic.Pointer[http.Handler]
	var gw atomic.Pointer[gateway.Gateway]
	// HTTP/1.1 and HTTP/2 without TLS (h2c, prior knowledge), for clients that
	// speak HTTP/2 to a plain-text endpoint; a TLS front proxy negotiates h2 itself.
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           rootHandler(&ready),
		Protocols:         &protocols,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if g := gw.Load(); g != nil {
				return g.ConnContext(ctx, c)
			}
			return ctx
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "data_dir", cfg.DataDir)

	app, err := start(ctx, cfg, log)
	if err != nil {
		_ = srv.Close()
		return err
	}
	defer app.close()
	gw.Store(app.gateway)
	h, err := app.handler(cfg, selfURL(ln.Addr()), log)
	if err != nil {
		_ = srv.Close()
		return err
	}
	ready.Store(&h)
	log.Info("ready", "api", "http://"+ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = app.mcp.Close(shutdownCtx) // kills the MCP sessions' sandboxes while the API still answers
	if app.builds != nil {
		_ = app.builds.Shutdown(shutdownCtx)
	}
	app.control.Shutdown(shutdownCtx)
	_ = srv.Shutdown(shutdownCtx)
	return nil
}

// defaultDomain is the sandbox domain when --domain is not given:
// "localhost:<port of the listener>", so that the SDKs' getHost(port) names
// "<port>-<id>.localhost:<listen port>", which browsers and curl resolve to the
// loopback address the gateway listens on (prefix it with http://).
func defaultDomain(addr net.Addr) string {
	if tcp, ok := addr.(*net.TCPAddr); ok {
		return "localhost:" + strconv.Itoa(tcp.Port)
	}
	return "localhost"
}

// rootHandler answers /health itself and sends everything else to the assembled
// handler once it exists (503 JSON before).
func rootHandler(ready *atomic.Pointer[http.Handler]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := ready.Load()
		if h == nil {
			if r.URL.Path == "/health" && r.Header.Get("E2b-Sandbox-Id") == "" {
				http.Error(w, "starting", http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"code":503,"message":"cubby is starting"}`)
			return
		}
		(*h).ServeHTTP(w, r)
	})
}

// app is the assembled server.
type app struct {
	control *controlplane.Service
	gateway *gateway.Gateway
	metrics *telemetry.Metrics
	mcp     *mcpserver.Service // set by handler
	health  *healthCheck       // nil on one host: ready means healthy
	closers []func()           // in reverse order of need
	log     *slog.Logger

	// One host only (nil in the cluster mode):
	store     *store.Store
	backend   *local.Backend
	egress    *egress.Supervisor
	templates *template.Manager
	builds    *builds.Service
	gcAge     time.Duration // see Config.TemplateGCAge
}

// handler routes /health, GET /metrics (unauthenticated), the MCP tools at
// /mcp, the web dashboard at /dashboard/ and the API behind the gateway; API requests are counted per route,
// sandbox-side ones per status class. self is the server's own URL, which the
// MCP tools are a client of.
func (a *app) handler(cfg Config, self string, log *slog.Logger) (http.Handler, error) {
	conn := sdk.ConnectionOptions{APIURL: self, SandboxURL: self, Domain: cfg.Domain, HTTPClient: selfClient()}
	a.mcp = mcpserver.New(mcpserver.Config{Connection: conn, Version: cfg.Version, Log: log.With("component", "mcp")})
	keys := apikey.NewChecker(conn, 0)
	dash, err := dashboard.New(dashboard.Config{Connection: conn, Check: keys.Check, Stats: a.metrics.Registry(),
		Version: cfg.Version, Log: log.With("component", "dashboard")})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.health.err(); err != nil {
			http.Error(w, "unhealthy: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok")
	})
	mux.Handle("GET /metrics", a.metrics.Handler())
	mux.Handle(MCPPath, a.mcp.Handler(keys.Check))
	dh := dash.Handler()
	mux.Handle(dashboard.Prefix, dh)
	mux.Handle(dashboard.Prefix+"/", dh)
	mux.Handle(controlplane.VolumeContentPrefix, a.control.VolumeContentHandler())
	mux.Handle("/", a.control.Handler())
	return a.metrics.InstrumentGateway(a.gateway.Handler(a.metrics.InstrumentAPI(mux))), nil
}

func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

func start(ctx context.Context, cfg Config, log *slog.Logger) (*app, error) {
	if cfg.Backend == BackendKubernetes {
		return startCluster(ctx, cfg, log)
	}
	st, err := store.Open(ctx, filepath.Join(cfg.DataDir, "cubby.db"))
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	a := &app{store: st, metrics: telemetry.New(), log: log, closers: []func(){func() { _ = st.Close() }}}
	ok := false
	defer func() {
		if !ok {
			a.close()
		}
	}()
	if a.templates, err = template.NewManager(cfg.TemplatesDir, log.With("component", "template")); err != nil {
		return nil, err
	}
	sealer, err := openSealer(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	secrets := &secretSource{}
	b, sup, err := newBackend(ctx, cfg, log, a.metrics, secrets)
	if err != nil {
		return nil, err
	}
	a.backend, a.egress = b, sup
	a.closers = append(a.closers, func() { _ = b.Close() }, func() { _ = sup.Close() })
	ob, err := outbound.FromHost(cfg.OutboundCA)
	if err != nil {
		return nil, fmt.Errorf("--outbound-ca: %w", err)
	}
	ready := &readySnapshots{Backend: b}
	builder, err := newBuilder(cfg, a.templates, b, ready, ob, log)
	if err != nil {
		return nil, err
	}
	if err := ensureTemplate(ctx, builder, a.templates, cfg.DefaultTemplate, cfg.Progress, a.metrics); err != nil {
		return nil, err
	}
	if a.builds, err = a.newBuilds(ctx, cfg, builder); err != nil {
		return nil, err
	}
	cp, err := a.startControl(ctx, cfg, controlDeps{secrets: secrets, outbound: ob, deps: controlplane.Deps{
		Store: st, Backend: b, Templates: controlplane.BuiltTemplates{Source: a.templates}, Sealer: sealer,
		TemplateStore: a.templates, Builds: a.builds, PruneTemplates: func() { go a.prune() },
		KeepSnapshots: func(context.Context) ([]string, error) { return a.templates.ReadySnapshots() },
	}})
	if err != nil {
		return nil, err
	}
	ready.control.Store(cp)
	if err := firstKey(ctx, cfg, cp, log); err != nil {
		return nil, err
	}
	a.gcAge = cfg.TemplateGCAge
	go a.prune()
	ok = true
	return a, nil
}

// newBuilder assembles the template builder: image pulls into the templates
// dir's OCI layout, build steps in sandboxes of backend b, ready snapshots
// of start commands through ready (nil: none).
func newBuilder(cfg Config, tm *template.Manager, b *local.Backend, ready template.ReadySnapshots, ob outbound.Settings, log *slog.Logger) (*template.Builder, error) {
	// An image reference is the requester's choice and pulls run on the host:
	// never towards sandboxes or link-local metadata services.
	deny := []netip.Prefix{cfg.Subnet, netip.MustParsePrefix("169.254.0.0/16"), netip.MustParsePrefix("fe80::/10")}
	puller, err := image.NewPuller(tm.Store(), image.PullerConfig{Mirror: cfg.RegistryMirror, DenyNets: deny})
	if err != nil {
		return nil, fmt.Errorf("--registry-mirror: %w", err)
	}
	return template.NewBuilder(template.BuilderConfig{
		Manager: tm, Sandboxes: b, Puller: puller, Outbound: ob, NewSandboxID: sandboxid.New,
		ReadySnapshots: ready, Log: log.With("component", "builder"),
	})
}

// newBuilds starts the template build service (after marking builds a crash
// interrupted as failed).
func (a *app) newBuilds(ctx context.Context, cfg Config, builder *template.Builder) (*builds.Service, error) {
	bs, err := builds.New(builds.Config{
		Store: a.store, Manager: a.templates, Builder: builder, Dir: filepath.Join(cfg.DataDir, "builds"),
		MaxConcurrent: cfg.BuildConcurrency, DefaultCPU: DefaultCPUCount, DefaultMemoryMB: cfg.MemoryMB,
		Log: a.log.With("component", "builds"),
		OnDone: func(_ template.Info, err error) {
			go a.pruneReady() // a rebuild replaced a build: its ready snapshot goes
			if err != nil {
				a.metrics.TemplateBuilt(telemetry.OutcomeError)
			} else {
				a.metrics.TemplateBuilt(telemetry.OutcomeOK)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return bs, bs.Recover(ctx)
}

// controlDeps is what start and startCluster hand startControl.
type controlDeps struct {
	// deps: Store, Backend and Templates; on one host Sealer, TemplateStore,
	// Builds and PruneTemplates; in a cluster Pool and Health.
	deps     controlplane.Deps
	secrets  *secretSource     // its control plane is set once made; nil in a cluster
	outbound outbound.Settings // given to sandboxes with --sandbox-outbound
}

// startControl assembles and starts the control plane and the gateway in
// front of it; on one host (a.egress set) also the egress proxies and the
// host metrics.
func (a *app) startControl(ctx context.Context, cfg Config, ctl controlDeps) (*controlplane.Service, error) {
	ccfg := controlplane.Config{
		DefaultTemplate: cfg.DefaultTemplate, DefaultCPU: DefaultCPUCount, DefaultMemoryMB: cfg.MemoryMB, Boot: cfg.Boot, Pool: cfg.Pool,
		PoolMemoryBudget: uint64(cfg.PoolMemoryMB) << 20, Domain: cfg.Domain, EnvAPIKey: cfg.EnvAPIKey,
		Admission: cfg.Admission,
	}
	if cfg.SandboxOutbound {
		ccfg.Outbound = ctl.outbound
	}
	var gwRef *gateway.Gateway
	deps := ctl.deps
	deps.OnKill = func(id string) {
		if gwRef != nil {
			gwRef.CloseSandbox(id)
		}
	}
	deps.Log, deps.Metrics = a.log.With("component", "controlplane"), a.metrics
	cp, err := controlplane.New(ccfg, deps)
	if err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	a.control = cp
	if ctl.secrets != nil {
		ctl.secrets.cp = cp
	}
	if err := a.startHost(ctx, cfg); err != nil {
		return nil, err
	}
	if err := a.metrics.WatchStates(cp); err != nil {
		return nil, err
	}
	gwRef = gateway.New(routes{cp}, gateway.Config{Domain: cfg.Domain}, a.log.With("component", "gateway"))
	a.gateway = gwRef
	if err := cp.Start(ctx); err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	return cp, nil
}

// startHost starts what only the single-host mode has: the egress proxies
// and the host metrics. A no-op in the cluster mode.
func (a *app) startHost(ctx context.Context, cfg Config) error {
	if a.egress == nil {
		return nil
	}
	if err := startEgress(ctx, a.egress, a.backend, a.metrics, a.log); err != nil {
		return err
	}
	return a.metrics.WatchHost(cfg.DataDir)
}

// prune removes template trees, layers and cached steps no template and no
// sandboxes of this server use (see template.Manager.Prune).
func (a *app) prune() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	a.pruneReady()
	res, err := a.templates.Prune(ctx, a.backend.Lowers(), a.gcAge)
	if err != nil {
		a.log.Warn("template prune", "err", err)
		return
	}
	if len(res.Trees)+res.Blobs+res.Steps > 0 {
		a.log.Info("pruned templates", "trees", len(res.Trees), "blobs", res.Blobs, "steps", res.Steps)
	}
}

// newBackend sets up the host network and builds the local backend with its
// egress proxy supervisor (started later, once secrets can be resolved).
func newBackend(ctx context.Context, cfg Config, log *slog.Logger, tel *telemetry.Metrics, secrets egress.SecretSource) (*local.Backend, *egress.Supervisor, error) {
	nm, err := network.New(network.Config{Bridge: cfg.Bridge, Subnet: cfg.Subnet, Prefix: cfg.Bridge + "-"}, log.With("component", "network"))
	if err != nil {
		return nil, nil, fmt.Errorf("network: %w", err)
	}
	if err := nm.Setup(ctx); err != nil {
		return nil, nil, fmt.Errorf("set up host network: %w", err)
	}
	exe, err := executable()
	if err != nil {
		return nil, nil, fmt.Errorf("locate cubby binary: %w", err)
	}
	if err := oci.InheritNoFile(); err != nil {
		log.Warn("sandboxes may get a lower open-file limit", "err", err)
	}
	rts, err := runtimes(ctx, cfg, exe, log)
	if err != nil {
		return nil, nil, err
	}
	var b *local.Backend
	sink := func(e proxy.Event) { egressSink(tel, b)(e) }
	sup, err := newSupervisor(cfg, nm, secrets, sink, tel.EgressProxyRestarted, log)
	if err != nil {
		return nil, nil, err
	}
	ids, creator, err := sandboxIDs(exe, log)
	if err != nil {
		return nil, nil, err
	}
	rm := rootfs.New(filepath.Join(cfg.DataDir, "cache", "disks"), log.With("component", "rootfs"))
	b, err = local.New(local.Config{
		Dir:         filepath.Join(cfg.DataDir, "sandboxes"),
		RunDir:      cfg.RunDir,
		AgentBinary: exe,
		Egress:      sup,
		Userns:      !cfg.DisableUserns,
		IDs:         ids,
		Namespaces:  creator,
	}, rts, nm, rm, log.With("component", "backend"))
	if err != nil {
		return nil, nil, err
	}
	log.Info("sandboxes", "user_namespaces", !cfg.DisableUserns, "run_dir", cfg.RunDir)
	return b, sup, nil
}

// timeoutTeardown bounds removing a build network.
const timeoutTeardown = 30 * time.Second

// executable is the path of the running cubby binary (every sandbox's agent).
func executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate cubby binary: %w", err)
	}
	return exe, nil
}

// sandboxIDs returns the host-wide id range allocator (stale leases pruned)
// and the user namespace creator running exe as its helper, and makes runRoot
// exist with mode 0711 (sandboxes' mapped roots traverse it).
func sandboxIDs(exe string, log *slog.Logger) (*userns.Allocator, *userns.Creator, error) {
	if err := os.MkdirAll(runRoot, 0o711); err != nil {
		return nil, nil, fmt.Errorf("create %s: %w", runRoot, err)
	}
	if err := os.Chmod(runRoot, 0o711); err != nil {
		return nil, nil, fmt.Errorf("create %s: %w", runRoot, err)
	}
	ids := userns.NewAllocator("")
	if n, err := ids.Prune(); err != nil || n > 0 {
		log.Info("pruned stale id range leases", "dropped", n, "err", err)
	}
	creator, err := userns.NewCreator(exe)
	if err != nil {
		return nil, nil, err
	}
	return ids, creator, nil
}

// runtimes returns the OCI runtimes the backend may use, the default first: runc
// always; gVisor's runsc when its binary is found (--runsc, next to the cubby
// binary, or on PATH). --runtime runsc without a runsc binary is an error. The
// version of each is logged.
func runtimes(ctx context.Context, cfg Config, exe string, log *slog.Logger) ([]runtime.Runtime, error) {
	runcBin := findTool("runc", cfg.RuncBinary, exe)
	if runcBin == "" {
		return nil, errors.New("no runc binary found (build it with `make runc`, or pass --runc PATH)")
	}
	if fixed, err := runc.EscapeFixed(logVersion(ctx, log, "runc", runcBin)); err == nil && !fixed {
		log.Error("this runc lacks the fixes of the 2025 container escapes (CVE-2025-31133, CVE-2025-52565, CVE-2025-52881); use the pinned one (`make runc`, bin/runc next to cubby)", "binary", runcBin)
	}
	rc := runc.New(runcBin, filepath.Join(cfg.DataDir, "runc"), log.With("component", "runc"))
	var rs runtime.Runtime
	if bin := findTool("runsc", cfg.RunscBinary, exe); bin != "" {
		logVersion(ctx, log, "runsc", bin)
		rs = runsc.New(bin, filepath.Join(cfg.DataDir, "runsc"), runsc.Options{}, log.With("component", "runsc"))
	}
	switch cfg.Runtime {
	case "", "runc":
		if rs != nil {
			return []runtime.Runtime{rc, rs}, nil
		}
		return []runtime.Runtime{rc}, nil
	case "runsc":
		if rs == nil {
			return nil, errors.New("--runtime runsc: no runsc binary found (build it with `make runsc`, or pass --runsc PATH)")
		}
		return []runtime.Runtime{rs, rc}, nil
	default:
		return nil, fmt.Errorf("--runtime %q: want runc or runsc", cfg.Runtime)
	}
}

// findTool resolves the binary of tool name: the flag's value (a path or a
// name on PATH), else bin/<name> next to the cubby binary (`make` builds the
// pinned runtimes there), else name on PATH; "" when there is none.
func findTool(name, flag, exe string) string {
	if flag != "" {
		if p, err := exec.LookPath(flag); err == nil {
			return p
		}
		return ""
	}
	if p := filepath.Join(filepath.Dir(exe), name); fileExists(p) {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	return ""
}

// logVersion logs the first line of `bin --version` (e.g. "runc version
// 1.5.2"), so the log says which runtime the sandboxes run under, and returns
// it ("" when unknown).
func logVersion(ctx context.Context, log *slog.Logger, name, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		log.Warn("runtime version unknown", "runtime", name, "binary", bin, "err", err)
		return ""
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	log.Info("OCI runtime", "runtime", name, "binary", bin, "version", first)
	return first
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// MCPPath is where `cubby serve` serves the MCP tools (streamable HTTP).
const MCPPath = "/mcp"

// selfURL is the URL the server reaches itself at: its listener, with an
// unspecified address replaced by the IPv4 loopback (Go's dual-stack
// listeners accept it).
func selfURL(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return "http://" + a.String()
	}
	ip := tcp.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return "http://" + net.JoinHostPort(ip.String(), strconv.Itoa(tcp.Port))
}

// selfClient is the HTTP client the MCP tools and the dashboard reach the
// server with: one pool of keep-alive connections to the own listener.
func selfClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the own listener is never behind a proxy
	tr.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: tr}
}
