package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/cubby-dev/cubby/internal/filesig"
	"github.com/cubby-dev/cubby/internal/sandboxid"
)

// Route is the sandbox and in-sandbox port a request is addressed to.
type Route struct {
	SandboxID string
	Port      int // 1–65535
}

// Match reports whether r is addressed to the sandbox side and where, trying in order:
//
//  1. both routing headers E2b-Sandbox-Id and E2b-Sandbox-Port (docs/wire/e2b-api.md §1.3);
//  2. a Host `<port>-<id>.<anything>`: the first DNS label split on its first "-",
//     port 1–65535, id [a-z0-9]+; never for "localhost", IP literals,
//     "sandbox.<domain>" or "api.<domain>" (docs/wire/e2b-api.md §1.2, §1.8 B);
//  3. a request carrying only one of the two headers: an error;
//  4. `/files` (exact path) without routing headers: routed to port 49983 of the
//     sandbox whose access token validates the `signature` query for operation read
//     (GET) or write (POST), with path, username and signature_expiration taken from
//     the query (docs/wire/envd.md §3.7, docs/wire/e2b-api.md §1.8 A); running sandboxes are preferred, a paused
//     match routes too (and then answers 502).
//
// A non-nil error means the request is for the sandbox side but cannot be routed
// (bad port, a lone header, a /files URL matching no sandbox); matched is then true.
// Expiration is not checked here; the agent does it.
func (g *Gateway) Match(r *http.Request) (route Route, matched bool, err error) {
	_, hasID := r.Header[HeaderSandboxID]
	_, hasPort := r.Header[HeaderSandboxPort]
	if hasID && hasPort {
		route, err := headerRoute(r.Header.Get(HeaderSandboxID), r.Header.Get(HeaderSandboxPort))
		return route, true, err
	}
	if route, ok := parseHost(r.Host, g.domain); ok {
		return route, true, nil
	}
	if hasID || hasPort {
		return Route{}, true, fmt.Errorf("both %s and %s headers are required", HeaderSandboxID, HeaderSandboxPort)
	}
	if r.URL != nil && r.URL.Path == "/files" {
		route, err := g.matchSigned(r)
		return route, true, err
	}
	return Route{}, false, nil
}

func headerRoute(id, portText string) (Route, error) {
	port, ok := parsePort(strings.TrimSpace(portText))
	if !ok {
		return Route{}, fmt.Errorf("invalid %s %q: want an integer 1-65535", HeaderSandboxPort, portText)
	}
	id = strings.TrimSpace(id)
	if id == "" {
		return Route{}, fmt.Errorf("empty %s header", HeaderSandboxID)
	}
	return Route{SandboxID: id, Port: port}, nil
}

// parseHost extracts a route from a Host value `<port>-<id>.<rest>` (with an optional
// :port suffix). It returns false for hosts that are not sandbox hosts.
func parseHost(host, domain string) (Route, bool) {
	host = strings.ToLower(host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	if host == "localhost" || isIPLiteral(host) {
		return Route{}, false
	}
	if domain != "" && (host == "sandbox."+domain || host == "api."+domain) {
		return Route{}, false
	}
	label, rest, ok := strings.Cut(host, ".")
	if !ok || rest == "" {
		return Route{}, false
	}
	portText, id, ok := strings.Cut(label, "-")
	if !ok || !sandboxid.Valid(id) {
		return Route{}, false
	}
	port, ok := parsePort(portText)
	if !ok {
		return Route{}, false
	}
	return Route{SandboxID: id, Port: port}, true
}

func isIPLiteral(host string) bool {
	_, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return err == nil
}

// parsePort accepts 1–5 ASCII digits with a value in 1–65535.
func parsePort(s string) (int, bool) {
	if len(s) == 0 || len(s) > 5 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, false
	}
	return n, true
}

// Errors of signed /files routing; both are answered 401 like envd's own checks
// (docs/wire/envd.md §3.7), since neither request can be authorised by any sandbox.
var (
	errUnsignedFiles    = errors.New("/files request without routing headers must carry a signature")
	errInvalidSignature = errors.New("invalid signature")
)

// matchErrorStatus is the HTTP status for an error returned by Match.
func matchErrorStatus(err error) int {
	if errors.Is(err, errUnsignedFiles) || errors.Is(err, errInvalidSignature) {
		return http.StatusUnauthorized
	}
	return http.StatusBadRequest
}

// matchSigned finds the sandbox whose access token validates a signed /files URL.
func (g *Gateway) matchSigned(r *http.Request) (Route, error) {
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return Route{}, errUnsignedFiles
	}
	var op string
	switch r.Method {
	case http.MethodGet:
		op = filesig.OpRead
	case http.MethodPost:
		op = filesig.OpWrite
	default:
		return Route{}, fmt.Errorf("signed /files supports GET and POST, not %s", r.Method)
	}
	var exp int64
	if s := q.Get("signature_expiration"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return Route{}, fmt.Errorf("invalid signature_expiration %q: %w", s, err)
		}
		exp = v
	}
	path, user := q.Get("path"), q.Get("username")
	var paused *Target
	for _, t := range g.res.Targets() {
		if t.AccessToken == "" || !filesig.Valid(sig, path, op, user, t.AccessToken, exp) {
			continue
		}
		if t.Running {
			return Route{SandboxID: t.ID, Port: EnvdPort}, nil
		}
		if paused == nil {
			paused = &t
		}
	}
	if paused != nil {
		return Route{SandboxID: paused.ID, Port: EnvdPort}, nil
	}
	return Route{}, errInvalidSignature
}
