package sdk

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/envdpb/filesystem/filesystemconnect"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
	"github.com/cubby-dev/cubby/sdk/internal/apiclient"
)

// CreateOptions configure Create (the NewSandboxV2 body of docs/wire/e2b-api.md §2.3).
type CreateOptions struct {
	ConnectionOptions
	// Template is the template ID or alias; default "base".
	Template string
	// Timeout is the sandbox lifetime, sent in whole seconds (rounded up);
	// 0 means DefaultSandboxTimeout (300 s).
	Timeout time.Duration
	// Metadata is stored with the sandbox and returned by List and GetInfo.
	Metadata map[string]string
	// Envs are the default environment of every command and code context.
	Envs map[string]string
	// AllowInternetAccess, when set, turns outbound internet access on or off.
	AllowInternetAccess *bool
	// AutoPause pauses the sandbox instead of killing it when the timeout
	// elapses (where the server supports pausing).
	AutoPause bool
	// Network is passed through to the server (egress allow/deny lists).
	Network *NetworkOptions
	// IdempotencyKey, when set, is sent as the Idempotency-Key header (1–255
	// lowercase letters, digits and hyphens): repeating the create with the
	// same key returns the sandbox the first create made instead of a second.
	IdempotencyKey string
}

// NetworkOptions are the sandbox network settings of docs/wire/e2b-api.md §2.2; the
// egress rules are those of NetworkUpdate (see there).
type NetworkOptions struct {
	NetworkUpdate
	// AllowPublicTraffic, when false, requires a traffic access token for
	// requests to the sandbox's ports other than envd's.
	AllowPublicTraffic *bool
	// MaskRequestHost replaces the Host header of requests into the sandbox;
	// "${PORT}" stands for the port.
	MaskRequestHost string
	// HTTPSPorts are sandbox ports that serve TLS (reached with TLS,
	// certificates not verified).
	HTTPSPorts []int
}

// ConnectOptions configure Connect.
type ConnectOptions struct {
	ConnectionOptions
	// Timeout extends the sandbox's lifetime to at least now + Timeout
	// (connect never shortens it); 0 means DefaultSandboxTimeout (300 s).
	Timeout time.Duration
}

// Sandbox is a connection to one running sandbox: its envd (Files, Commands,
// Pty), its code interpreter (RunCode and the *CodeContext methods) and its
// control-plane operations. It is safe for concurrent use.
type Sandbox struct {
	id           string
	domain       string // server-returned sandbox domain, "" when none
	envdVersion  string
	accessToken  string
	trafficToken string

	cfg       config
	hc        *http.Client // shared base client
	closeIdle func()
	cp        *controlPlane // nil when cpErr says why (debug mode without API key)
	cpErr     error
	envdHTTP  *http.Client // adds routing headers and the access token
	ciHTTP    *http.Client // code interpreter: routing headers and the traffic token
	proc      processconnect.ProcessClient
	fsys      filesystemconnect.FilesystemClient

	// Files reads and writes the sandbox filesystem (docs/wire/envd.md §3.3, §3.4).
	Files *Filesystem
	// Commands starts and manages processes (docs/wire/envd.md §3.3).
	Commands *Commands
	// Pty starts and drives interactive terminals (docs/wire/envd.md §3.3).
	Pty *Pty
}

// Create starts a new sandbox from a template (POST /v2/sandboxes, docs/wire/e2b-api.md
// §2.3) and returns a connection to it. In debug mode it makes no API call and
// returns the sandbox "debug_sandbox_id" (docs/wire/e2b-api.md §1.7). Errors:
// *AuthenticationError (no or wrong API key), *NotFoundError (unknown
// template), *InvalidArgumentError, *RateLimitError, *ConnectionError,
// *TimeoutError, *APIError.
func Create(ctx context.Context, opts *CreateOptions) (*Sandbox, error) {
	if opts == nil {
		opts = &CreateOptions{}
	}
	cfg := opts.ConnectionOptions.resolve()
	if cfg.debug {
		return newDebugSandbox(cfg, debugSandboxID), nil
	}
	hc, closeIdle := cfg.newHTTPClient()
	cp, err := newControlPlane(&cfg, hc)
	if err != nil {
		return nil, err
	}
	sb, err := cp.create(ctx, createBody(opts), opts.IdempotencyKey)
	if err != nil {
		closeIdle()
		return nil, err
	}
	s := newSandboxFrom(cfg, cp, hc, closeIdle, sb)
	if !versionAtLeast(s.envdVersion, "0.1.0") {
		_ = s.Kill(context.WithoutCancel(ctx))
		return nil, &APIError{Message: fmt.Sprintf("template %q runs envd %s, older than 0.1.0 which this SDK needs; rebuild the template", opts.Template, s.envdVersion)}
	}
	return s, nil
}

func createBody(opts *CreateOptions) apiclient.NewSandboxV2 {
	body := apiclient.NewSandboxV2{
		TemplateID:          new(firstNonEmpty(opts.Template, DefaultTemplate)),
		Timeout:             new(seconds(effectiveTimeout(opts.Timeout, DefaultSandboxTimeout))),
		AllowInternetAccess: opts.AllowInternetAccess,
	}
	if len(opts.Metadata) > 0 {
		body.Metadata = new(apiclient.SandboxMetadata(maps.Clone(opts.Metadata)))
	}
	if len(opts.Envs) > 0 {
		body.EnvVars = new(apiclient.EnvVars(maps.Clone(opts.Envs)))
	}
	if opts.AutoPause {
		body.AutoPause = new(true)
	}
	if n := opts.Network; n != nil {
		body.Network = n.wire()
	}
	return body
}

// Connect connects to a running or paused sandbox by ID, resuming it when
// paused (POST /v2/sandboxes/{id}/connect, docs/wire/e2b-api.md §2.3). Errors:
// *NotFoundError (unknown or killed sandbox) and those of Create.
func Connect(ctx context.Context, id string, opts *ConnectOptions) (*Sandbox, error) {
	if opts == nil {
		opts = &ConnectOptions{}
	}
	cfg := opts.ConnectionOptions.resolve()
	if cfg.debug {
		return newDebugSandbox(cfg, id), nil
	}
	hc, closeIdle := cfg.newHTTPClient()
	cp, err := newControlPlane(&cfg, hc)
	if err != nil {
		return nil, err
	}
	sb, err := cp.connect(ctx, id, opts.Timeout)
	if err != nil {
		closeIdle()
		return nil, err
	}
	return newSandboxFrom(cfg, cp, hc, closeIdle, sb), nil
}

// Kill kills the sandbox with the given ID (DELETE /sandboxes/{id}). Errors:
// *NotFoundError when no such sandbox runs, and the control-plane errors of
// Create. In debug mode it does nothing.
func Kill(ctx context.Context, id string, opts *ConnectionOptions) error {
	if opts.resolve().debug {
		return nil
	}
	return withControlPlane(opts, func(cp *controlPlane) error { return cp.kill(ctx, id) })
}

// GetInfo describes the sandbox with the given ID without connecting to (and
// so without resuming) it (GET /sandboxes/{id}). Errors: *NotFoundError and
// the control-plane errors of Create.
func GetInfo(ctx context.Context, id string, opts *ConnectionOptions) (*SandboxInfo, error) {
	var info *SandboxInfo
	err := withControlPlane(opts, func(cp *controlPlane) error {
		d, err := cp.get(ctx, id)
		if err == nil {
			info = infoFromDetail(d)
		}
		return err
	})
	return info, err
}

// withControlPlane runs f with a control-plane client whose idle connections
// are released afterwards.
func withControlPlane(opts *ConnectionOptions, f func(*controlPlane) error) error {
	cfg := opts.resolve()
	hc, closeIdle := cfg.newHTTPClient()
	defer closeIdle()
	cp, err := newControlPlane(&cfg, hc)
	if err != nil {
		return err
	}
	return f(cp)
}

// newDebugSandbox is the sandbox of debug mode (docs/wire/e2b-api.md §1.7): no API call,
// envd version 99.99.99, no access token. GetInfo and Pause still use the
// control plane when an API key is configured.
func newDebugSandbox(cfg config, id string) *Sandbox {
	s := newSandbox(cfg, nil, id, "", debugEnvdVersion, "", "")
	s.cp, s.cpErr = newControlPlane(&s.cfg, s.hc)
	return s
}

func newSandboxFrom(cfg config, cp *controlPlane, hc *http.Client, closeIdle func(), sb *apiclient.Sandbox) *Sandbox {
	s := newSandbox(cfg, hc, sb.SandboxID, deref(sb.Domain), sb.EnvdVersion, deref(sb.EnvdAccessToken), deref(sb.TrafficAccessToken))
	s.cp, s.closeIdle = cp, closeIdle
	return s
}

// newSandbox wires the envd clients; hc nil means a new owned client.
func newSandbox(cfg config, hc *http.Client, id, domain, envdVersion, token, traffic string) *Sandbox {
	s := &Sandbox{id: id, domain: domain, envdVersion: envdVersion, accessToken: token, trafficToken: traffic, cfg: cfg, hc: hc}
	if hc == nil {
		s.hc, s.closeIdle = cfg.newHTTPClient()
	}
	h := http.Header{}
	h.Set("E2b-Sandbox-Id", id)
	h.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	h.Set("User-Agent", userAgent())
	if token != "" {
		h.Set("X-Access-Token", token)
	}
	s.envdHTTP = withHeaders(s.hc, h)
	ch := http.Header{}
	ch.Set("E2b-Sandbox-Id", id)
	ch.Set("E2b-Sandbox-Port", strconv.Itoa(CodeInterpreterPort))
	ch.Set("User-Agent", userAgent())
	if traffic != "" {
		ch.Set("E2B-Traffic-Access-Token", traffic)
	}
	s.ciHTTP = withHeaders(s.hc, ch)
	base := cfg.envdURL(id, domain)
	s.proc = processconnect.NewProcessClient(s.envdHTTP, base, connect.WithProtoJSON())
	s.fsys = filesystemconnect.NewFilesystemClient(s.envdHTTP, base, connect.WithProtoJSON())
	s.Files = &Filesystem{s: s}
	s.Commands = &Commands{s: s}
	s.Pty = &Pty{s: s}
	return s
}

// ID returns the sandbox ID.
func (s *Sandbox) ID() string { return s.id }

// EnvdVersion returns the envd protocol version the server reported.
func (s *Sandbox) EnvdVersion() string { return s.envdVersion }

// AccessToken returns the envd access token ("" for an unsecured sandbox).
// It authorises every envd request (X-Access-Token, docs/wire/e2b-api.md §1.4).
func (s *Sandbox) AccessToken() string { return s.accessToken }

// TrafficAccessToken returns the sandbox's traffic access token ("" when the
// server returned none): sent as E2B-Traffic-Access-Token, it is required on
// the sandbox's ports when it was created with AllowPublicTraffic false, and a
// Cubby server accepts it on the code-interpreter routes of a secured sandbox.
func (s *Sandbox) TrafficAccessToken() string { return s.trafficToken }

// Domain returns the sandbox's domain: the server-returned one, else the
// configured domain.
func (s *Sandbox) Domain() string { return firstNonEmpty(s.domain, s.cfg.domain) }

// GetHost returns the host name ("<port>-<id>.<domain>", or "localhost:<port>"
// in debug mode; no scheme) under which port of the sandbox is reachable with
// wildcard host routing (docs/wire/e2b-api.md §1.2). It ignores SandboxURL.
func (s *Sandbox) GetHost(port int) string { return s.cfg.host(s.id, s.domain, port) }

// Close releases the idle connections of the sandbox's transport. The sandbox
// keeps running. The Sandbox stays usable (new connections are made on
// demand).
func (s *Sandbox) Close() error {
	if s.closeIdle != nil {
		s.closeIdle()
	}
	return nil
}

// Kill kills the sandbox (DELETE /sandboxes/{id}) and releases idle
// connections. Errors: *NotFoundError when it no longer runs, and the
// control-plane errors of Create. A no-op in debug mode.
func (s *Sandbox) Kill(ctx context.Context) error {
	defer s.Close()
	if s.cfg.debug {
		return nil
	}
	return s.cp.kill(ctx, s.id)
}

// SetTimeout replaces the sandbox's deadline with now + timeout, which may
// shorten or extend its life (POST /sandboxes/{id}/timeout; whole seconds,
// rounded up). Errors: *NotFoundError, control-plane errors. A no-op in debug
// mode.
func (s *Sandbox) SetTimeout(ctx context.Context, timeout time.Duration) error {
	if timeout < 0 {
		return &InvalidArgumentError{Message: "SetTimeout: timeout must not be negative"}
	}
	if s.cfg.debug {
		return nil
	}
	return s.cp.setTimeout(ctx, s.id, timeout)
}

// GetInfo describes the sandbox (GET /sandboxes/{id}). Errors: *NotFoundError,
// control-plane errors. In debug mode it still calls the control plane
// (http://localhost:3000 unless APIURL says otherwise), like the official SDKs.
func (s *Sandbox) GetInfo(ctx context.Context) (*SandboxInfo, error) {
	if s.cp == nil {
		return nil, s.cpErr
	}
	d, err := s.cp.get(ctx, s.id)
	if err != nil {
		return nil, err
	}
	return infoFromDetail(d), nil
}

// PauseOptions configure Pause.
type PauseOptions struct {
	// KeepMemory, when set to false, pauses to the filesystem only: processes
	// are stopped and restarted on resume, files are kept. Default (nil):
	// keep the processes' memory.
	KeepMemory *bool
}

// Pause pauses the sandbox (POST /sandboxes/{id}/pause); Resume or Connect
// brings it back. It returns false when the sandbox was already paused.
// Errors: *NotFoundError, *APIError with status 501 when the server cannot
// pause, control-plane errors.
func (s *Sandbox) Pause(ctx context.Context, opts *PauseOptions) (bool, error) {
	if s.cp == nil {
		return false, s.cpErr
	}
	var keep *bool
	if opts != nil {
		keep = opts.KeepMemory
	}
	return s.cp.pause(ctx, s.id, keep)
}

// ResumeOptions configure Resume.
type ResumeOptions struct {
	// Timeout extends the sandbox's lifetime to at least now + Timeout;
	// 0 means DefaultSandboxTimeout (300 s).
	Timeout time.Duration
}

// Resume resumes a paused sandbox (a connect, POST /v2/sandboxes/{id}/connect);
// on a running sandbox it only extends the deadline. Errors: *NotFoundError,
// control-plane errors.
func (s *Sandbox) Resume(ctx context.Context, opts *ResumeOptions) error {
	if s.cfg.debug {
		return nil
	}
	var timeout time.Duration
	if opts != nil {
		timeout = opts.Timeout
	}
	_, err := s.cp.connect(ctx, s.id, timeout)
	return err
}

// MetricsOptions bound the samples GetMetrics returns; zero times mean the
// sandbox start and now.
type MetricsOptions struct {
	Start time.Time
	End   time.Time
}

// GetMetrics returns resource samples of the sandbox, oldest first (GET
// /sandboxes/{id}/metrics with unix-second bounds). Errors: *NotFoundError,
// control-plane errors. Returns nil in debug mode.
func (s *Sandbox) GetMetrics(ctx context.Context, opts *MetricsOptions) ([]SandboxMetrics, error) {
	if s.cfg.debug {
		return nil, nil
	}
	if !versionAtLeast(s.envdVersion, "0.1.5") {
		return nil, &APIError{Message: "metrics need envd 0.1.5 or newer; rebuild the template"}
	}
	var o MetricsOptions
	if opts != nil {
		o = *opts
	}
	ms, err := s.cp.metrics(ctx, s.id, o.Start, o.End)
	if err != nil {
		return nil, err
	}
	return metricsFrom(ms), nil
}

// IsRunning probes envd's GET /health through the sandbox proxy: true on
// success, false when the proxy answers 502 (killed, paused or timed out;
// docs/wire/e2b-api.md §1.3). Errors: *ConnectionError, *TimeoutError, *APIError for other
// statuses.
func (s *Sandbox) IsRunning(ctx context.Context) (bool, error) {
	rctx, cancel := s.cfg.requestContext(ctx)
	defer cancel()
	return s.health(ctx, rctx)
}

func (s *Sandbox) health(ctx, rctx context.Context) (bool, error) {
	url := s.cfg.envdURL(s.id, s.domain) + "/health"
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return false, &InvalidArgumentError{Message: err.Error()}
	}
	resp, err := s.envdHTTP.Do(req)
	if err != nil {
		return false, s.cfg.transportError(ctx, rctx, "health check", url, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusBadGateway:
		return false, nil
	case resp.StatusCode/100 == 2:
		return true, nil
	}
	return false, &APIError{StatusCode: resp.StatusCode, Message: "health check: unexpected status"}
}

// killedProbeTimeout bounds the /health probe after a failed request.
const killedProbeTimeout = 5 * time.Second

// probeKilled reports whether the sandbox is gone (its /health answers 502),
// checked after a request failed at the transport level (docs/wire/envd.md §3.5).
func (s *Sandbox) probeKilled(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killedProbeTimeout)
	defer cancel()
	running, err := s.health(pctx, pctx)
	return err == nil && !running
}
