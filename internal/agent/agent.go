// Package agent is the in-sandbox daemon (`cubby agent`): it serves the envd protocol
// on port 49983 — Connect RPC services filesystem.Filesystem and process.Process, the
// /files HTTP API, /health, /init, /envs and /metrics (docs/wire/envd.md) — and the
// code interpreter on port 49999 (package interpreter, docs/wire/code-interpreter.md).
//
// Everything under internal/agent runs inside the sandbox, and the arrows point one
// way: the agent imports only its own packages, the contracts both sides share
// (internal/agentapi/..., internal/envdpb/..., internal/filesig, and the kernels'
// files the template builder installs, internal/agent/kernels/...) and the cgroupfs
// and mountinfo readers; host packages import those contracts, never the agent's
// internals. TestArrows checks both with go list.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/agent/files"
	"github.com/cubby-dev/cubby/internal/agent/filesystem"
	"github.com/cubby-dev/cubby/internal/agent/interpreter"
	"github.com/cubby-dev/cubby/internal/agent/process"
	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agent/trust"
	"github.com/cubby-dev/cubby/internal/agent/users"
	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/envdpb/filesystem/filesystemconnect"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
)

// Config configures the agent.
type Config struct {
	// Addr is the envd listen address, default ":49983".
	Addr string
	// InterpreterAddr is the code-interpreter listen address, default ":49999";
	// "-" disables the code interpreter.
	InterpreterAddr string
	// Boot holds the code-interpreter start options (default contexts, Python
	// preload); nil fields keep the interpreter's defaults.
	Boot agentapi.BootOptions
	Log  *slog.Logger
}

// Agent is the envd server. Create it with New, run it with Serve.
type Agent struct {
	cfg      Config
	settings *settings.Settings
	fs       *filesystem.Service
	proc     *process.Service
	interp   *interpreter.Service // nil when disabled
	handler  http.Handler
	ready    chan struct{} // closed once the default code contexts are up and warm
}

// New assembles the envd services around fresh default settings (user "user",
// workdir /home/user, unsecured until POST /init sets a token).
func New(cfg Config) *Agent {
	if cfg.Addr == "" {
		cfg.Addr = ":" + strconv.Itoa(agentapi.EnvdPort)
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	s := settings.New()
	if err := loadInit(s); err != nil {
		cfg.Log.Warn("ignoring saved init settings", "err", err)
	}
	a := &Agent{
		cfg:      cfg,
		settings: s,
		fs:       filesystem.NewService(s, cfg.Log.With("svc", "filesystem")),
		proc:     process.NewService(s, cfg.Log.With("svc", "process")),
		ready:    make(chan struct{}),
	}
	a.handler = a.routes()
	if cfg.InterpreterAddr == "" {
		cfg.InterpreterAddr = ":" + strconv.Itoa(agentapi.InterpreterPort)
		a.cfg.InterpreterAddr = cfg.InterpreterAddr
	}
	if cfg.InterpreterAddr != "-" {
		if err := os.MkdirAll(agentapi.KernelLogDir, 0o700); err != nil {
			cfg.Log.Warn("kernel logs disabled", "dir", agentapi.KernelLogDir, "err", err)
		}
		interp, err := interpreter.New(interpreter.Config{
			Env:              s.EnvVars,
			User:             interpreter.DefaultUser,
			LookupUser:       lookupAccount,
			Workdir:          s.Workdir(),
			Log:              cfg.Log.With("svc", "interpreter"),
			KernelLogDir:     agentapi.KernelLogDir,
			DefaultLanguages: cfg.Boot.DefaultContexts,
			ZygotePreload:    cfg.Boot.PythonPreload,
		})
		if err != nil {
			cfg.Log.Warn("code interpreter disabled", "err", err)
		} else {
			a.interp = interp
		}
	}
	if a.interp == nil {
		close(a.ready)
	}
	return a
}

// lookupAccount resolves a sandbox user for the code interpreter's kernels
// (errors as users.Lookup's).
func lookupAccount(name string) (interpreter.Account, error) {
	u, err := users.Lookup(name)
	if err != nil {
		return interpreter.Account{}, err
	}
	return interpreter.Account(*u), nil
}

// Settings returns the sandbox-level settings shared by every service.
func (a *Agent) Settings() *settings.Settings { return a.settings }

// Handler returns the envd HTTP handler (for tests and embedding).
func (a *Agent) Handler() http.Handler { return a.handler }

func (a *Agent) routes() http.Handler {
	mux := http.NewServeMux()
	fsPath, fsHandler := filesystemconnect.NewFilesystemHandler(a.fs)
	procPath, procHandler := processconnect.NewProcessHandler(a.proc)
	mux.Handle(fsPath, fsHandler)
	mux.Handle(procPath, procHandler)
	mux.Handle("/files", files.NewHandler(a.settings, a.cfg.Log.With("svc", "files")))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /init", a.handleInit)
	mux.HandleFunc("GET /ready", a.handleReady)
	mux.HandleFunc("GET /envs", a.handleEnvs)
	mux.HandleFunc("GET /metrics", a.handleMetrics)
	return cors(a.requireToken(mux))
}

// unauthorizedBody is envd's exact 401 body (docs/wire/envd.md).
const unauthorizedBody = `{"code":401,"message":"unauthorized access, please provide a valid access token or method signing if supported"}`

// requireToken enforces X-Access-Token on every route of a secured sandbox except
// GET /health and /files (which accepts a URL signature instead and checks itself).
func (a *Agent) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/files" || r.Method == http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		if !a.settings.CheckToken(r.Header.Get(headerAccessToken)) {
			writeUnauthorized(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// writeUnauthorized answers 401 with envd's body.
func writeUnauthorized(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(unauthorizedBody))
}

// cors answers browsers the way envd does: any origin, any header, Connect headers exposed.
func cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "*")
		h.Set("Access-Control-Expose-Headers", "Connect-Protocol-Version, Connect-Timeout-Ms, Grpc-Status, Grpc-Message, Content-Encoding, Content-Disposition")
		h.Set("Access-Control-Max-Age", "7200")
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *Agent) handleInit(w http.ResponseWriter, r *http.Request) {
	var req agentapi.InitRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, fmt.Sprintf("decode init request: %v", err))
		return
	}
	a.settings.Apply(req)
	if err := setHostname(req.Hostname); err != nil {
		a.cfg.Log.Warn("cannot set the hostname", "hostname", req.Hostname, "err", err)
	}
	if err := egressTrust(req.EgressCA); err != nil {
		a.cfg.Log.Warn("egress CA: HTTPS to hosts with network rules will not verify", "err", err)
	}
	if a.interp != nil && (len(req.EnvVars) > 0 || req.EgressCA != "") {
		go a.syncEnv()
	}
	if err := saveInit(req); err != nil {
		a.cfg.Log.Warn("cannot save init settings; a restarted agent will not have them", "err", err)
	}
	if !req.Timestamp.IsZero() {
		if skew := time.Since(req.Timestamp); skew > time.Second || skew < -time.Second {
			a.cfg.Log.Warn("clock skew between host and sandbox", "skew", skew)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// setHostname makes name the sandbox's hostname unless it is empty or
// already the hostname (a sandbox restored from another's memory image still
// has the other's).
func setHostname(name string) error {
	if cur, err := os.Hostname(); name == "" || err == nil && cur == name {
		return nil
	}
	return unix.Sethostname([]byte(name))
}

// egressTrust installs the egress CA into the sandbox's trust stores, or
// removes it when ca is empty.
func egressTrust(ca string) error {
	if ca == "" {
		return trust.Remove("/")
	}
	return trust.Install("/", []byte(ca))
}

// startDefaults starts the default code contexts, warms them, and marks the
// agent ready.
func (a *Agent) startDefaults(ctx context.Context) {
	defer close(a.ready)
	if err := a.interp.StartDefaults(ctx); err != nil {
		a.cfg.Log.Warn("default code contexts", "err", err)
	}
	if err := a.interp.Warm(ctx); err != nil {
		a.cfg.Log.Warn("warm default code contexts", "err", err)
	}
}

// handleReady answers 204 once the sandbox is fully booted: the default code
// contexts are live and warm (or the interpreter is disabled); 503 before.
// Warm pools poll it so a claimed sandbox never waits for a kernel.
func (a *Agent) handleReady(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-a.ready:
		w.WriteHeader(http.StatusNoContent)
	default:
		writeJSONError(w, http.StatusServiceUnavailable, "default code contexts are starting")
	}
}

// syncEnv pushes new sandbox env vars into the live code contexts right away
// (a warm sandbox just claimed), ahead of the first execution.
func (a *Agent) syncEnv() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.interp.SyncEnv(ctx); err != nil {
		a.cfg.Log.Warn("push env vars into code contexts", "err", err)
	}
}

func (a *Agent) handleEnvs(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.settings.EnvVars())
}

func (a *Agent) handleMetrics(w http.ResponseWriter, _ *http.Request) {
	m, err := sampleMetrics()
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, m)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

// Serve listens on the envd and code-interpreter addresses and serves until ctx
// is done, then shuts down gracefully (within 2 s) and stops every process, kernel
// and watcher it started. The default code contexts start in the background.
func (a *Agent) Serve(ctx context.Context) error {
	envd, err := net.Listen("tcp", a.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", a.cfg.Addr, err)
	}
	var interp net.Listener
	if a.interp != nil {
		if interp, err = net.Listen("tcp", a.cfg.InterpreterAddr); err != nil {
			envd.Close()
			return fmt.Errorf("listen %s: %w", a.cfg.InterpreterAddr, err)
		}
	}
	return a.ServeListeners(ctx, envd, interp)
}

// ServeListeners is Serve on existing listeners; interp may be nil.
func (a *Agent) ServeListeners(ctx context.Context, envd, interp net.Listener) error {
	servers := []*http.Server{a.server(a.handler)}
	listeners := []net.Listener{envd}
	if interp != nil && a.interp != nil {
		servers = append(servers, a.server(a.interpreterHandler()))
		listeners = append(listeners, interp)
		go a.startDefaults(ctx)
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errc <- srv.Serve(listeners[i]) }()
		a.cfg.Log.Info("listening", "addr", listeners[i].Addr().String(), "envd_version", agentapi.EnvdVersion)
	}
	var serveErr error
	select {
	case err := <-errc:
		serveErr = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) && serveErr == nil {
			serveErr = fmt.Errorf("shutdown: %w", err)
		}
	}
	a.close()
	return serveErr
}

func (a *Agent) server(h http.Handler) *http.Server {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &protocols,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       agentapi.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(a.cfg.Log.Handler(), slog.LevelDebug),
	}
}

// interpreterHandler serves the code interpreter behind interpreterAuth.
func (a *Agent) interpreterHandler() http.Handler {
	return interpreterAuth(a.interp.Handler(), a.settings)
}

// Headers that authenticate code-interpreter requests (docs/wire/envd.md): the
// official SDKs send the traffic token on every code-context call and the
// access token on POST /execute.
const (
	headerAccessToken  = "X-Access-Token"
	headerTrafficToken = "E2B-Traffic-Access-Token"
)

// interpreterAuth guards the code interpreter next of a sandbox with settings
// s: once secured, every route but /health requires the sandbox's access token
// in X-Access-Token or its traffic access token in E2B-Traffic-Access-Token
// (settings.CheckInterpreterToken). A missing or wrong token gets 401 with
// envd's body and never reaches next.
func interpreterAuth(next http.Handler, s *settings.Settings) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" && !s.CheckInterpreterToken(r.Header.Get(headerAccessToken), r.Header.Get(headerTrafficToken)) {
			writeUnauthorized(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *Agent) close() {
	a.fs.Close()
	a.proc.Close()
	if a.interp != nil {
		_ = a.interp.Close()
	}
}
