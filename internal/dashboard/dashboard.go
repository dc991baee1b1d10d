// Package dashboard is Cubby's web dashboard, served by `cubby serve` under
// Prefix: an overview of the server (running and paused sandboxes, create
// latency, warm-pool fill, host CPU, memory and disk), a sandboxes table
// (filters; kill, pause, resume, extend, bulk kill), one sandbox's page (live
// metrics chart, logs with live tail, a terminal over a WebSocket, a file
// browser with upload and download, a notebook cell streaming its output)
// and the templates with their build logs.
//
// People log in with an API key. The key stays on the server: the browser
// holds an HttpOnly, SameSite=Strict session cookie naming an in-memory
// session; every state-changing request must carry the session's CSRF token
// and pass Go's cross-origin protection (Sec-Fetch-Site / Origin). The
// dashboard is a client of the public wire protocol only (package sdk) with
// the session's key, so it sees and touches exactly what that key may.
//
// Its HTML, CSS and JavaScript are embedded in the binary (web/); xterm.js is
// vendored there by scripts/vendor-web.sh (go generate), so nothing is loaded
// from elsewhere at run time.
package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cubby-dev/cubby/sdk"
)

// Prefix is the path the dashboard is served under.
const Prefix = "/dashboard"

// Defaults of Config.
const (
	// DefaultSessionIdle logs a browser out after this long without a request.
	DefaultSessionIdle = time.Hour
	// DefaultSessionMax logs a browser out this long after login.
	DefaultSessionMax = 12 * time.Hour
)

// KeyCheck tells whether an API key is valid: nil when it is, an error
// wrapping apikey.ErrInvalid when it is not, another error when it cannot
// tell. apikey.Checker.Check is one.
type KeyCheck func(ctx context.Context, key string) error

// Config configures the dashboard.
type Config struct {
	// Connection reaches the server's API and sandbox gateway (its own
	// URL); the key of each call is the session's. Set its HTTPClient to
	// share connections between requests.
	Connection sdk.ConnectionOptions
	// Check validates the key given at login. Required.
	Check KeyCheck
	// Stats, when set, gathers the server's metrics (telemetry) for the
	// overview: host figures, warm pools and create latency.
	Stats prometheus.Gatherer
	// SessionIdle and SessionMax bound a login; defaults DefaultSessionIdle
	// and DefaultSessionMax.
	SessionIdle time.Duration
	SessionMax  time.Duration
	// Version is shown in the footer.
	Version string
	// Log receives operational logs (never keys or tokens); nil discards.
	Log *slog.Logger
}

// Dashboard serves the web dashboard. Safe for concurrent use.
type Dashboard struct {
	cfg      Config
	sessions *sessions
	pages    *pages
	assets   *assets

	cpuMu   sync.Mutex
	lastCPU cpuSample // previous host CPU reading, for a usage figure
	lastPct float64   // the usage computed at lastCPU; -1 before the second reading
}

// New builds the dashboard. Errors: no Check, or broken embedded templates.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Check == nil {
		return nil, errors.New("dashboard: a key check is required")
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.SessionMax <= 0 {
		cfg.SessionMax = DefaultSessionMax
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	as, err := loadAssets()
	if err != nil {
		return nil, err
	}
	pg, err := loadPages(as, cfg.Version)
	if err != nil {
		return nil, err
	}
	return &Dashboard{cfg: cfg, sessions: newSessions(cfg.SessionIdle, cfg.SessionMax), pages: pg, assets: as, lastPct: -1}, nil
}

// Handler serves the dashboard; mount it at Prefix + "/" (a request for
// Prefix itself is redirected there).
func (d *Dashboard) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+Prefix+"/static/", d.assets)
	mux.HandleFunc("GET "+Prefix+"/login", d.loginPage)
	mux.HandleFunc("POST "+Prefix+"/login", d.login)
	mux.Handle("POST "+Prefix+"/logout", d.auth(d.logout))
	mux.Handle("GET "+Prefix+"/{$}", d.auth(d.overviewPage))
	mux.Handle("GET "+Prefix+"/sandboxes", d.auth(d.sandboxesPage))
	mux.Handle("POST "+Prefix+"/sandboxes/actions", d.auth(d.actions))
	mux.Handle("GET "+Prefix+"/sandboxes/{id}", d.auth(d.sandboxPage))
	mux.Handle("GET "+Prefix+"/sandboxes/{id}/download", d.auth(d.withSandbox(download)))
	mux.Handle("GET "+Prefix+"/sandboxes/{id}/terminal", d.auth(d.terminal))
	mux.Handle("GET "+Prefix+"/templates", d.auth(d.templatesPage))
	mux.Handle("GET "+Prefix+"/templates/{id}", d.auth(d.templatePage))
	mux.Handle("GET "+Prefix+"/api/overview", d.auth(d.overviewJSON))
	mux.Handle("GET "+Prefix+"/api/sandboxes/{id}/metrics", d.auth(d.metricsJSON))
	mux.Handle("GET "+Prefix+"/api/sandboxes/{id}/logs", d.auth(d.logsJSON))
	mux.Handle("GET "+Prefix+"/api/sandboxes/{id}/files", d.auth(d.withSandbox(filesJSON)))
	mux.Handle("POST "+Prefix+"/api/sandboxes/{id}/files", d.auth(d.withSandbox(upload)))
	mux.Handle("GET "+Prefix+"/api/sandboxes/{id}/contexts", d.auth(d.withSandbox(contextsJSON)))
	mux.Handle("POST "+Prefix+"/api/sandboxes/{id}/execute", d.auth(d.withSandbox(execute)))
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"/", http.StatusSeeOther)
	})
	mux.HandleFunc(Prefix+"/", func(w http.ResponseWriter, r *http.Request) {
		d.errorPage(w, r, http.StatusNotFound, "There is no such page.")
	})
	return secure(http.NewCrossOriginProtection().Handler(mux))
}

// handlerFunc is a dashboard handler with the caller's session.
type handlerFunc func(w http.ResponseWriter, r *http.Request, sess *session)

// auth runs h with the request's session. Without a live session pages are
// redirected to the login page and API calls answered 401; a state-changing
// request without the session's CSRF token (form field "csrf" or header
// X-CSRF-Token) is answered 403.
func (d *Dashboard) auth(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess := d.sessions.get(r)
		if sess == nil {
			if isAPI(r) {
				writeError(w, http.StatusUnauthorized, "your dashboard session expired: log in again")
				return
			}
			http.Redirect(w, r, Prefix+"/login?next="+urlQueryEscape(r.URL.Path), http.StatusSeeOther)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			token := r.Header.Get("X-CSRF-Token")
			if token == "" && !strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/") {
				token = r.PostFormValue("csrf")
			}
			if !sess.validCSRF(token) {
				writeError(w, http.StatusForbidden, "missing or wrong CSRF token: reload the page")
				return
			}
		}
		h(w, r, sess)
	})
}

// isAPI reports whether r is a JSON/stream call rather than a page load.
func isAPI(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, Prefix+"/api/") || r.Header.Get("Upgrade") != ""
}

// conn returns the SDK connection of a session.
func (d *Dashboard) conn(sess *session) sdk.ConnectionOptions {
	c := d.cfg.Connection
	c.APIKey = sess.key
	return c
}

// contentSecurityPolicy allows only the dashboard's own scripts; images may
// be data: URLs (charts and PNG results); styles may be inline (xterm.js
// sets its own); nothing may frame the dashboard.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; connect-src 'self'; frame-src 'self'; object-src 'none'; base-uri 'none'; " +
	"form-action 'self'; frame-ancestors 'none'"

// secure sets the security headers of every dashboard response.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		if !strings.HasPrefix(r.URL.Path, Prefix+"/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// errorText is the message of an SDK error as a person reads it.
func errorText(err error) string {
	var nf *sdk.NotFoundError
	var auth *sdk.AuthenticationError
	switch {
	case errors.As(err, &auth):
		return "The server no longer accepts the API key of this session (revoked?): log out and in again."
	case errors.Is(err, sdk.ErrSandboxKilled):
		return "The sandbox was killed or paused during the request."
	case errors.As(err, &nf) && nf.Resource == sdk.ResourceSandbox:
		return fmt.Sprintf("Sandbox %s does not exist any more (killed or timed out).", nf.ID)
	case errors.As(err, &nf) && nf.Resource == sdk.ResourceFile:
		return fmt.Sprintf("%s: no such file or directory.", nf.ID)
	}
	return err.Error()
}
