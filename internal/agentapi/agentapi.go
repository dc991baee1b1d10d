// Package agentapi is the contract between the in-sandbox agent and everything
// that talks to it: envd's ports, paths and defaults, and the wire types of the
// agent's private endpoints (POST /init, GET /metrics) and boot flags. It
// imports nothing of either side and builds on every platform, so the host
// (internal/agentclient drives an agent), the agent and the public SDK share
// one definition of each (docs/wire/envd.md).
package agentapi

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// EnvdPort is the TCP port the agent's envd protocol listens on inside every sandbox.
const EnvdPort = 49983

// DefaultUser and DefaultWorkdir are the user requests run as and the
// directory empty paths resolve to until POST /init names others
// (InitRequest.DefaultUser, DefaultWorkdir): E2B templates' "user" in its home.
const (
	DefaultUser    = "user"
	DefaultWorkdir = "/home/" + DefaultUser
)

// AgentPath is where the agent binary (the Cubby binary) appears inside every
// sandbox: bind-mounted by the local backend, baked into the image by
// `cubby template export` for the kubernetes backend.
const AgentPath = "/opt/cubby/bin/cubby"

// InterpreterPort is the TCP port of the code-interpreter service inside a sandbox.
const InterpreterPort = 49999

// KernelLogDir is where the agent keeps one capped log per kernel,
// "<context id>.log", plus the Python fork server's "zygote.log" (root-only;
// kernel lines are log/slog JSON records with "source":"kernel"). The host
// reads them beneath the sandbox rootfs for GET /sandboxes/{id}/logs.
const KernelLogDir = StateDir + "/kernels"

// StateDir holds what the agent keeps of one sandbox's life on its disk: its
// last init (access token, env vars) and its kernels' logs. It belongs to that
// sandbox alone: snapshots and forks are captured without it.
const StateDir = "/run/cubby"

// EnvdVersion is the envd protocol version the agent implements and the control
// plane reports as envdVersion (semver and PEP 440 compatible). Every feature
// gated at or below it (docs/wire/e2b-api.md §2.5) is implemented.
const EnvdVersion = "0.6.13"

// InitRequest configures a freshly started agent: POST /init, answered with 204.
// Once an access token is set, a later /init must carry it in X-Access-Token.
type InitRequest struct {
	// EnvVars are the sandbox-level environment variables (the create request's
	// envVars); every process and code context inherits them.
	EnvVars map[string]string `json:"envVars,omitempty"`
	// AccessToken, when non-empty, secures the agent: every request except
	// GET /health must carry it in X-Access-Token (or a /files URL signature).
	AccessToken string `json:"accessToken,omitempty"`
	// TrafficAccessToken is the sandbox's trafficAccessToken (the create and
	// connect responses' field, docs/wire/e2b-api.md §1.4). On a secured agent it is the
	// other credential the code interpreter (port 49999) accepts, in header
	// E2B-Traffic-Access-Token: the official code-interpreter SDKs send it on
	// every code-context call and X-Access-Token only on POST /execute. envd
	// routes (port 49983) never accept it. "" = only X-Access-Token is accepted.
	TrafficAccessToken string `json:"trafficAccessToken,omitempty"`
	// DefaultUser is the user requests run as when they name none ("" =
	// the agent keeps what it has, initially the package's DefaultUser).
	DefaultUser string `json:"defaultUser,omitempty"`
	// DefaultWorkdir is the directory an empty path and a process without cwd
	// resolve to ("" = the agent keeps what it has, initially DefaultWorkdir).
	DefaultWorkdir string `json:"defaultWorkdir,omitempty"`
	// Timestamp is the host's wall clock when it sent the request; the agent uses
	// it only for logging clock skew.
	Timestamp time.Time `json:"timestamp,omitzero"`
	// Hostname, when set and different from the sandbox's, becomes its
	// hostname (sethostname(2)): a sandbox restored from another's memory
	// image takes its own name.
	Hostname string `json:"hostname,omitempty"`
	// EgressCA is the PEM certificate of the server's egress CA, set when the
	// sandbox's network rules rewrite HTTPS requests (the egress proxy then
	// terminates their TLS): the agent adds it to the system trust store, the
	// certifi bundles of Python and the default env (NODE_EXTRA_CA_CERTS,
	// DENO_CERT); "" removes what an earlier init installed.
	EgressCA string `json:"egressCA,omitempty"`
}

// Metrics is the body of the agent's GET /metrics: one sample of the sandbox's
// resource use as seen from inside (units: bytes, percent).
type Metrics struct {
	Timestamp  int64   `json:"ts"`           // unix seconds
	CPUCount   int     `json:"cpu_count"`    // CPUs available
	CPUUsedPct float64 `json:"cpu_used_pct"` // 0..100*cpu_count
	MemUsed    uint64  `json:"mem_used"`     // bytes
	MemTotal   uint64  `json:"mem_total"`    // bytes
	MemCache   uint64  `json:"mem_cache"`    // bytes
	DiskUsed   uint64  `json:"disk_used"`    // bytes of the root filesystem
	DiskTotal  uint64  `json:"disk_total"`   // bytes of the root filesystem
}

// CABundlePath is where a sandbox sees the CA bundle the server passes in
// (backend.CreateRequest.CABundle): build steps always get it when the
// server has one, user sandboxes when the operator allows it.
const CABundlePath = "/opt/cubby/etc/ca-certificates.crt"

// CAEnv returns the variables that point TLS clients at CABundlePath:
// OpenSSL (and what uses it: curl, git, Python's ssl), pip and requests, and
// Node.js (which adds it to its built-in CAs).
func CAEnv() map[string]string {
	env := map[string]string{}
	for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"} {
		env[k] = CABundlePath
	}
	return env
}

// BootOptions configure an agent when it starts, on its command line
// (`cubby agent --default-contexts=… --python-preload=…`). Nil fields keep the
// agent's defaults.
type BootOptions struct {
	// DefaultContexts are the languages whose code contexts start at boot
	// (nil = python and javascript; empty = none, each starts on first use).
	DefaultContexts []string
	// PythonPreload lists the modules the Python fork server imports for its
	// kernels (nil = numpy, pandas, matplotlib and matplotlib.pyplot, those
	// installed; empty = none: smaller kernels, slower first import).
	PythonPreload []string
	// NoInterpreter disables the code interpreter (no kernels, nothing on
	// port 49999), as template build sandboxes run.
	NoInterpreter bool
}

// Boot option flags of `cubby agent`.
const (
	FlagDefaultContexts = "default-contexts"
	FlagPythonPreload   = "python-preload"
	FlagNoInterpreter   = "no-code-interpreter"
)

// IdleTimeout is how long the agent keeps an idle keep-alive connection open.
// Host-side clients of the agent (the gateway's upstream transport keeps idle
// connections 90 s) must drop idle connections sooner.
const IdleTimeout = 2 * time.Minute

// Args returns the agent flags for o, e.g. ["--default-contexts=python"]; nil
// fields give no flag.
func (o BootOptions) Args() []string {
	var args []string
	if o.DefaultContexts != nil {
		args = append(args, "--"+FlagDefaultContexts+"="+strings.Join(o.DefaultContexts, ","))
	}
	if o.PythonPreload != nil {
		args = append(args, "--"+FlagPythonPreload+"="+strings.Join(o.PythonPreload, ","))
	}
	if o.NoInterpreter {
		args = append(args, "--"+FlagNoInterpreter)
	}
	return args
}

// Key identifies o: equal options give equal keys.
func (o BootOptions) Key() string { return strings.Join(o.Args(), " ") }

// LinkToken is the credential the agent of a sandbox is initialised with
// (InitRequest.AccessToken) when its clients' access token is accessToken: 64
// hex digits, SHA-256 over a label and accessToken (random and distinct per
// sandbox, so links are too); "" for an unsecured sandbox (accessToken "").
// Clients authenticate at the gateway with their access token, traffic token
// or signed URL; the gateway forwards to the agent with this credential
// instead, so no client credential ever enters a sandbox's memory (where a
// memory snapshot would carry it into forks). It is one-way: holding it (as a
// fork of the sandbox does, in its memory image) reveals nothing of
// accessToken, and the gateway never accepts it from a client.
func LinkToken(accessToken string) string {
	if accessToken == "" {
		return ""
	}
	sum := sha256.Sum256([]byte("cubby agent link v1\x00" + accessToken))
	return hex.EncodeToString(sum[:])
}
