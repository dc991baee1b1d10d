// Package gateway is the sandbox side of Cubby's single listener: it recognises
// requests addressed to a sandbox (routing headers, `<port>-<id>.<domain>` hosts, or
// signed /files URLs), reverse-proxies them over HTTP/1.1 to the sandbox's address,
// and cuts every connection of a sandbox abruptly when it is killed or paused.
//
// The wire facts are in docs/wire/e2b-api.md §1.3, §1.4, §1.8 and docs/wire/envd.md
// §3.5, §3.7.
package gateway

import (
	"context"
	"crypto/subtle"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/sandboxid"
)

// Header names and ports of the sandbox side (docs/wire/e2b-api.md §1.3, §1.4).
const (
	// HeaderSandboxID carries the sandbox ID on header-routed requests.
	HeaderSandboxID = "E2b-Sandbox-Id"
	// HeaderSandboxPort carries the in-sandbox TCP port (1–65535) on header-routed requests.
	HeaderSandboxPort = "E2b-Sandbox-Port"
	// HeaderTrafficToken carries the traffic access token required on non-envd ports
	// of sandboxes created with allowPublicTraffic:false, and is the code
	// interpreter's other credential; checked here, never forwarded.
	HeaderTrafficToken = "E2b-Traffic-Access-Token"
	// EnvdPort is the port of envd (the in-sandbox agent); it is exempt from the
	// traffic token and is the port signed /files URLs are routed to.
	EnvdPort = agentapi.EnvdPort
	// DefaultDialTimeout is used when Config.DialTimeout is zero.
	DefaultDialTimeout = 5 * time.Second
)

// Target is what the gateway needs to know about one sandbox.
type Target struct {
	ID           string     // sandbox ID, [a-z0-9]+
	Addr         netip.Addr // address the host reaches the sandbox's ports on
	HostIface    string     // host interface every upstream connection is bound to (SO_BINDTODEVICE); "" = unbound
	Running      bool       // false while paused: requests get 502 (docs/wire/e2b-api.md §1.3)
	AccessToken  string     // envdAccessToken; "" for unsecured sandboxes (docs/wire/envd.md §3.7)
	TrafficToken string     // trafficAccessToken; "" when public traffic is allowed (docs/wire/e2b-api.md §1.4)
	// InterpreterToken is the trafficAccessToken the code interpreter of a
	// secured sandbox accepts instead of AccessToken (docs/wire/e2b-api.md §1.4), set
	// whether or not its ports are public; "" = none.
	InterpreterToken string
	// MaskRequestHost, when set, replaces the Host header of requests to the
	// sandbox (network.maskRequestHost; MaskPort stands for the port).
	MaskRequestHost string
	// HTTPSPorts are the sandbox ports served over TLS (network.httpsPorts):
	// the gateway connects to them with TLS, without verifying certificates.
	HTTPSPorts []int
}

// MaskPort is the placeholder of Target.MaskRequestHost replaced by the port.
const MaskPort = "${PORT}"

// requestHost is the Host header sent upstream for a request to port.
func (t Target) requestHost(in string, port int) string {
	if t.MaskRequestHost == "" {
		return in
	}
	return strings.ReplaceAll(t.MaskRequestHost, MaskPort, strconv.Itoa(port))
}

// Resolver looks sandboxes up. It is called on every request, so implementations must
// answer from memory and be safe for concurrent use.
type Resolver interface {
	// Resolve returns the target for id, or false when the sandbox is unknown or killed.
	Resolve(id string) (Target, bool)
	// Targets returns every known sandbox (running or paused); used to route signed
	// /files URLs that carry no sandbox identity (docs/wire/e2b-api.md §1.8 A).
	Targets() []Target
}

// Config tunes a Gateway.
type Config struct {
	// Domain is the sandbox domain (E2B_DOMAIN), e.g. "cubby.example.com", with an
	// optional ":port" (ignored here). Hosts "sandbox.<Domain>" and
	// "api.<Domain>" are never host-routed. May be empty.
	Domain string
	// DialTimeout bounds connecting to a sandbox port; 0 means DefaultDialTimeout.
	// A refused or timed-out dial answers 502 "The sandbox was not found".
	DialTimeout time.Duration
}

// Gateway routes and proxies sandbox-side requests. It is an http.Handler; install
// ConnContext as the http.Server's ConnContext so CloseSandbox can reset client
// sockets. Safe for concurrent use.
type Gateway struct {
	res       Resolver
	domain    string
	log       *slog.Logger
	reg       *registry
	transport *http.Transport
	proxy     *httputil.ReverseProxy
}

// New returns a Gateway resolving sandboxes through res. log may be nil (discard).
func New(res Resolver, cfg Config, log *slog.Logger) *Gateway {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	g := &Gateway{
		res:    res,
		domain: domainHost(cfg.Domain),
		log:    log,
		reg:    newRegistry(),
	}
	g.transport = g.newTransport(cfg.DialTimeout)
	g.proxy = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		ModifyResponse: markCompletion,
		Transport:      g.transport,
		FlushInterval:  -1,
		BufferPool:     newBufferPool(),
		ErrorHandler:   g.proxyError,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return g
}

// domainHost is the lower-case host part of a domain[:port] without a trailing dot.
func domainHost(domain string) string {
	if h, _, err := net.SplitHostPort(domain); err == nil {
		domain = h
	}
	return strings.TrimSuffix(strings.ToLower(domain), ".")
}

// Handler returns a handler that serves sandbox-side requests (per Match) itself and
// passes every other request to api, so both share one listener (docs/wire/e2b-api.md §1.8).
func (g *Gateway) Handler(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route, ok, err := g.Match(r)
		switch {
		case err != nil:
			writeError(w, matchErrorStatus(err), err.Error())
		case ok:
			g.serveRoute(w, r, route)
		default:
			api.ServeHTTP(w, r)
		}
	})
}

// ServeHTTP proxies a sandbox-side request to the sandbox. Answers (JSON bodies):
// 400 {"code":400,"message"} when the request cannot be routed (see Match);
// 502 {"sandboxId","message":"The sandbox was not found","code":502} for an unknown,
// paused or unreachable sandbox (a paused one is first resumed when the Resolver
// is a Waker that allows it; see Waker); 403 {"code":403,"message"} for a missing or wrong
// traffic token on a non-envd port. The upstream hop is HTTP/1.1, streamed both ways.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route, ok, err := g.Match(r)
	switch {
	case err != nil:
		writeError(w, matchErrorStatus(err), err.Error())
	case !ok:
		writeError(w, http.StatusBadRequest, "request is not addressed to a sandbox")
	default:
		g.serveRoute(w, r, route)
	}
}

// serveRoute checks the target and proxies the request while the client stream is
// registered under the sandbox, so CloseSandbox can cut it.
func (g *Gateway) serveRoute(w http.ResponseWriter, r *http.Request, route Route) {
	t, ok := g.lookup(route.SandboxID)
	if !ok {
		t, ok = g.wake(r.Context(), route.SandboxID)
	}
	if !ok {
		writeNotFound(w, route.SandboxID)
		return
	}
	if t.TrafficToken != "" && route.Port != EnvdPort && !tokenMatches(r, t.TrafficToken) {
		writeError(w, http.StatusForbidden, "missing or invalid traffic access token")
		return
	}
	if msg, ok := authorize(r, route.Port, t); !ok {
		writeUnauthorized(w, msg)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	cs := newClientStream(r, cancel)
	g.reg.add(route.SandboxID, cs)
	defer g.reg.remove(route.SandboxID, cs)

	pt := &proxyTarget{id: route.SandboxID, addr: t.Addr, iface: t.HostIface, port: route.Port, stream: cs,
		host: t.requestHost(r.Host, route.Port), https: route.Port != EnvdPort && slices.Contains(t.HTTPSPorts, route.Port)}
	var body *eofReader
	if r.Body != nil && r.Body != http.NoBody {
		body = &eofReader{body: r.Body}
		r.Body = body
	}
	out := r.WithContext(context.WithValue(ctx, proxyTargetKey{}, pt))
	toAgent(out, route.Port, t)
	// The upstream transport reads the client's body while the response is relayed
	// (it checks for EOF after Content-Length bytes, and streams longer bodies). An
	// HTTP/1 server not in full-duplex mode consumes and closes that body as soon as
	// the response headers are written; the transport's next read then fails and it
	// closes the upstream connection mid-response. HTTP/2 is always full duplex and
	// reports ErrNotSupported, which is fine.
	_ = http.NewResponseController(w).EnableFullDuplex()
	g.proxy.ServeHTTP(&relayWriter{ResponseWriter: w, stream: cs}, out)
	if cs.killed.Load() {
		// The sandbox was closed mid-request: never finish the response cleanly.
		// HTTP/1 connections are already reset; HTTP/2 streams get RST_STREAM.
		panic(http.ErrAbortHandler)
	}
	if body != nil {
		lingerBody(w, body)
	}
}

// bodyLinger bounds how long lingerBody reads a body the sandbox did not.
const bodyLinger = 10 * time.Second

// lingerBody reads and discards, for up to bodyLinger, the rest of a request body
// the sandbox answered before reading it all (507 for an upload larger than its
// disk, say). An HTTP/1 server that closes a connection with unread data resets
// it, and a client still sending its body then often gets the reset instead of
// the answer already on its way.
func lingerBody(w http.ResponseWriter, body *eofReader) {
	if body.eof.Load() {
		return
	}
	rc := http.NewResponseController(w)
	if rc.Flush() != nil || rc.SetReadDeadline(time.Now().Add(bodyLinger)) != nil {
		return
	}
	_, _ = io.Copy(io.Discard, body)
}

// eofReader is a request body that records whether it was read to its end.
// Close does not close the body (the server does once the handler returns), so
// lingerBody can still read what the upstream transport left.
type eofReader struct {
	body io.ReadCloser
	eof  atomic.Bool
}

// Read implements io.Reader.
func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.body.Read(p)
	if err == io.EOF {
		e.eof.Store(true)
	}
	return n, err
}

// Close implements io.Closer; see eofReader.
func (e *eofReader) Close() error { return nil }

// lookup resolves a running sandbox with a routable ID.
func (g *Gateway) lookup(id string) (Target, bool) {
	if !sandboxid.Valid(id) {
		return Target{}, false
	}
	t, ok := g.res.Resolve(id)
	if !ok || !t.Running || !t.Addr.IsValid() {
		return Target{}, false
	}
	return t, true
}

func tokenMatches(r *http.Request, want string) bool {
	got := r.Header.Get(HeaderTrafficToken)
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// CloseSandbox abruptly closes every connection of sandbox id at once: client
// connections currently carrying a request for it are reset (TCP RST via SO_LINGER 0;
// HTTP/2 streams get RST_STREAM), and upstream connections dialed to it are closed.
// In-flight streams therefore fail with a transport error, which the SDKs turn into
// "sandbox was killed" after probing /health (docs/wire/envd.md §3.5). Call it after the
// Resolver stops reporting the sandbox as running, so later requests get 502.
func (g *Gateway) CloseSandbox(id string) {
	conns := g.reg.take(id)
	// Client streams first: once an upstream connection is closed the proxy would
	// end the client's response itself, with a FIN, before the reset could go out.
	for _, c := range conns {
		if _, ok := c.(*clientStream); ok {
			c.abort()
		}
	}
	for _, c := range conns {
		if _, ok := c.(*clientStream); !ok {
			c.abort()
		}
	}
	if len(conns) > 0 {
		g.log.Debug("closed sandbox connections", "sandbox", id, "count", len(conns))
	}
}

// CloseIdleConnections closes idle upstream keep-alive connections (e.g. at shutdown).
func (g *Gateway) CloseIdleConnections() {
	g.transport.CloseIdleConnections()
}

// bufferPool recycles 32 KiB copy buffers for streamed bodies.
type bufferPool struct{ p sync.Pool }

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}
}

func (b *bufferPool) Get() []byte { return *(b.p.Get().(*[]byte)) }

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
