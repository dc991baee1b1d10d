// Package agent is the in-sandbox daemon (`cubby agent`): it serves the envd protocol
// on port 49983 — Connect RPC services filesystem.Filesystem and process.Process, the
// /files HTTP API, /health, /init, /envs and /metrics — as described in
// shared/protocol/e2b-wire.md §3.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/files"
	"github.com/cubby-dev/cubby/internal/agent/filesystem"
	"github.com/cubby-dev/cubby/internal/agent/process"
	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/envdpb/filesystem/filesystemconnect"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
)

// Config configures the agent.
type Config struct {
	// Addr is the envd listen address, default ":49983".
	Addr string
	Log  *slog.Logger
}

// Agent is the envd server. Create it with New, run it with Serve.
type Agent struct {
	cfg      Config
	settings *settings.Settings
	fs       *filesystem.Service
	proc     *process.Service
	handler  http.Handler
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
	}
	a.handler = a.routes()
	return a
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
	mux.HandleFunc("GET /envs", a.handleEnvs)
	mux.HandleFunc("GET /metrics", a.handleMetrics)
	return cors(a.requireToken(mux))
}

// unauthorizedBody is envd's exact 401 body (E2B wire §1.4).
const unauthorizedBody = `{"code":401,"message":"unauthorized access, please provide a valid access token or method signing if supported"}`

// requireToken enforces X-Access-Token on every route of a secured sandbox except
// GET /health and /files (which accepts a URL signature instead and checks itself).
func (a *Agent) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" || r.URL.Path == "/files" || r.Method == http.MethodOptions {
			next.ServeHTTP(w, r)
			return
		}
		if !a.settings.CheckToken(r.Header.Get("X-Access-Token")) {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(unauthorizedBody))
			return
		}
		next.ServeHTTP(w, r)
	})
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

// Serve listens on the configured address and serves until ctx is done, then
// shuts down gracefully (within 2 s) and stops every process and watcher it started.
func (a *Agent) Serve(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", a.cfg.Addr, err)
	}
	return a.ServeListener(ctx, ln)
}

// ServeListener is Serve on an existing listener.
func (a *Agent) ServeListener(ctx context.Context, ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           a.handler,
		Protocols:         &protocols,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(a.cfg.Log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.cfg.Log.Info("envd listening", "addr", ln.Addr().String(), "version", agentapi.EnvdVersion)
	select {
	case err := <-errc:
		a.close()
		return fmt.Errorf("serve envd: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	a.close()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown envd: %w", err)
	}
	return nil
}

func (a *Agent) close() {
	a.fs.Close()
	a.proc.Close()
}
