package sdk

import (
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// Version is the version of this SDK, sent in the User-Agent header.
const Version = "0.1.0"

// Default ports and timeouts of the E2B protocol (docs/wire/e2b-api.md §1.2, §1.6).
const (
	// EnvdPort is the port of envd, the in-sandbox daemon (49983,
	// docs/wire/envd.md §3).
	EnvdPort = agentapi.EnvdPort
	// CodeInterpreterPort is the port of the code-interpreter service (49999,
	// docs/wire/code-interpreter.md §4).
	CodeInterpreterPort = agentapi.InterpreterPort
	// DefaultRequestTimeout bounds each unary request and the handshake of each
	// stream (docs/wire/e2b-api.md §1.6).
	DefaultRequestTimeout = 60 * time.Second
	// DefaultStreamTimeout is the default lifetime of commands, PTYs, directory
	// watches and code executions (docs/wire/e2b-api.md §1.6, docs/wire/code-interpreter.md §4.5).
	DefaultStreamTimeout = 60 * time.Second
	// DefaultSandboxTimeout is the default lifetime of a new sandbox (docs/wire/e2b-api.md §2.3).
	DefaultSandboxTimeout = 300 * time.Second
	// DefaultTemplate is the template a Create without Template uses.
	DefaultTemplate = "base"
	// DefaultUser is the user name the SDK sends to envd older than 0.4.0,
	// which has no default user (docs/wire/e2b-api.md §2.5).
	DefaultUser = agentapi.DefaultUser
	// DefaultDomain is E2B's cloud domain, used when neither the options nor
	// E2B_DOMAIN name one.
	DefaultDomain = "e2b.app"
)

// NoTimeout, used as a timeout option, disables that timeout (the wire value 0).
const NoTimeout time.Duration = -1

// debugSandboxID is the ID a debug-mode Create returns (docs/wire/e2b-api.md §1.7).
const debugSandboxID = "debug_sandbox_id"

// debugEnvdVersion is the envd version assumed in debug mode (docs/wire/e2b-api.md §1.7).
const debugEnvdVersion = "99.99.99"

// ConnectionOptions say where the control plane and the sandboxes are and how
// to authenticate. Zero fields fall back to the environment variables of the
// official SDKs (docs/wire/e2b-api.md §1.1) and then to E2B's defaults.
type ConnectionOptions struct {
	// APIKey is sent as X-API-KEY to the control plane; default $E2B_API_KEY.
	APIKey string
	// Domain is the domain of the API and sandbox hosts; default $E2B_DOMAIN,
	// then "e2b.app". A domain returned by the server for a sandbox wins.
	Domain string
	// APIURL is the control-plane base URL; default $E2B_API_URL, then
	// http://localhost:3000 in debug mode, else https://api.<Domain>.
	APIURL string
	// SandboxURL, when set, is the base URL of every in-sandbox request (envd
	// and the code interpreter), routed by the E2b-Sandbox-Id/-Port headers;
	// default $E2B_SANDBOX_URL. Use a bare origin without a path.
	SandboxURL string
	// Debug talks to a local envd (localhost:49983) and code interpreter
	// (localhost:49999) without creating sandboxes through the API. It is also
	// on when $E2B_DEBUG is "true" (case-insensitive). docs/wire/e2b-api.md §1.7.
	Debug bool
	// RequestTimeout bounds each unary request and the handshake of each
	// stream; 0 means DefaultRequestTimeout (60 s), NoTimeout disables it.
	RequestTimeout time.Duration
	// Headers are added to every control-plane request.
	Headers map[string]string
	// HTTPClient, when set, carries every request. The caller owns it; by
	// default each Sandbox (and each package-level call) uses its own
	// transport.
	HTTPClient *http.Client
	// Logger receives debug logs of the requests made; nil means no logging.
	Logger *slog.Logger
}

// config is ConnectionOptions with the environment and defaults applied.
type config struct {
	apiKey         string
	domain         string
	apiURL         string
	sandboxURL     string
	debug          bool
	requestTimeout time.Duration // 0 = none
	headers        map[string]string
	httpClient     *http.Client // nil = own one
	logger         *slog.Logger
}

// resolve applies the environment variables and defaults of docs/wire/e2b-api.md §1.1–§1.2.
func (o *ConnectionOptions) resolve() config {
	var opts ConnectionOptions
	if o != nil {
		opts = *o
	}
	c := config{
		apiKey:     firstNonEmpty(opts.APIKey, os.Getenv("E2B_API_KEY")),
		domain:     firstNonEmpty(opts.Domain, os.Getenv("E2B_DOMAIN"), DefaultDomain),
		sandboxURL: strings.TrimRight(firstNonEmpty(opts.SandboxURL, os.Getenv("E2B_SANDBOX_URL")), "/"),
		debug:      opts.Debug || strings.EqualFold(strings.TrimSpace(os.Getenv("E2B_DEBUG")), "true"),
		headers:    opts.Headers,
		httpClient: opts.HTTPClient,
		logger:     opts.Logger,
	}
	c.apiURL = firstNonEmpty(opts.APIURL, os.Getenv("E2B_API_URL"))
	if c.apiURL == "" {
		if c.debug {
			c.apiURL = "http://localhost:3000"
		} else {
			c.apiURL = "https://api." + c.domain
		}
	}
	c.apiURL = strings.TrimRight(c.apiURL, "/")
	c.requestTimeout = effectiveTimeout(opts.RequestTimeout, DefaultRequestTimeout)
	return c
}

// effectiveTimeout maps an option value to a duration: 0 → def, NoTimeout (or
// any negative value) → 0 meaning "none".
func effectiveTimeout(v, def time.Duration) time.Duration {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// e2bCloudDomains are the domains whose envd traffic goes to the shared
// sandbox.<domain> host (docs/wire/e2b-api.md §1.2).
var e2bCloudDomains = map[string]bool{"e2b.app": true, "e2b.dev": true, "e2b.pro": true, "e2b-staging.dev": true}

// envdURL is the base URL of envd RPC and REST for a sandbox (getSandboxUrl,
// docs/wire/e2b-api.md §1.2). sandboxDomain is the server-returned domain or "".
func (c *config) envdURL(id, sandboxDomain string) string {
	sd := firstNonEmpty(sandboxDomain, c.domain)
	switch {
	case c.sandboxURL != "":
		return c.sandboxURL
	case c.debug:
		return "http://localhost:" + strconv.Itoa(EnvdPort)
	case e2bCloudDomains[sd]:
		return "https://sandbox." + sd
	}
	return "https://" + strconv.Itoa(EnvdPort) + "-" + id + "." + sd
}

// directURL is the per-port sandbox URL used for signed file URLs and the code
// interpreter (docs/wire/e2b-api.md §1.2).
func (c *config) directURL(id, sandboxDomain string, port int) string {
	switch {
	case c.sandboxURL != "":
		return c.sandboxURL
	case c.debug:
		return "http://localhost:" + strconv.Itoa(port)
	}
	return "https://" + strconv.Itoa(port) + "-" + id + "." + firstNonEmpty(sandboxDomain, c.domain)
}

// host is getHost(port): "<port>-<id>.<domain>", or "localhost:<port>" in debug
// mode. It ignores SandboxURL (docs/wire/e2b-api.md §1.2).
func (c *config) host(id, sandboxDomain string, port int) string {
	if c.debug {
		return "localhost:" + strconv.Itoa(port)
	}
	return strconv.Itoa(port) + "-" + id + "." + firstNonEmpty(sandboxDomain, c.domain)
}

// userAgent is the User-Agent of every request.
func userAgent() string { return "cubby-go-sdk/" + Version }
