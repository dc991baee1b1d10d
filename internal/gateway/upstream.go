package gateway

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/linkdial"
	"github.com/cubby-dev/cubby/internal/sandboxid"
)

// upstreamSuffix ends the synthetic host names used as upstream pool keys.
const upstreamSuffix = ".upstream.invalid"

// proxyTarget travels in the proxied request's context.
type proxyTarget struct {
	id     string
	addr   netip.Addr
	iface  string // host interface the upstream connection is bound to
	port   int
	stream *clientStream
	host   string // Host header sent upstream
	https  bool   // the port serves TLS (network.httpsPorts)
}

type proxyTargetKey struct{}

// upstream is where one upstream connection goes: a sandbox's address and port,
// reached over its host interface.
type upstream struct {
	id    string
	ap    netip.AddrPort
	iface string
}

// upstreamHost names the upstream as "<id>.<hex addr>.<hex iface>.upstream.invalid:<port>"
// (the interface may be empty), so the Transport's keep-alive pool is keyed by
// sandbox, address and interface: a connection is never reused for another
// sandbox, even when an address is recycled. dialUpstream decodes it.
func upstreamHost(id string, addr netip.Addr, iface string, port int) string {
	host := id + "." + hex.EncodeToString(addr.AsSlice()) + "." + hex.EncodeToString([]byte(iface)) + upstreamSuffix
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func parseUpstreamHost(hostport string) (upstream, error) {
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		return upstream{}, fmt.Errorf("upstream address %q: %w", hostport, err)
	}
	parts := strings.Split(strings.TrimSuffix(host, upstreamSuffix), ".")
	if len(parts) != 3 {
		return upstream{}, fmt.Errorf("malformed upstream address %q", hostport)
	}
	raw, err := hex.DecodeString(parts[1])
	iface, ierr := hex.DecodeString(parts[2])
	addr, ok := netip.AddrFromSlice(raw)
	port, pok := parsePort(portText)
	if err != nil || ierr != nil || !ok || !pok || !sandboxid.Valid(parts[0]) || len(iface) >= 16 {
		return upstream{}, fmt.Errorf("malformed upstream address %q", hostport)
	}
	return upstream{id: parts[0], ap: netip.AddrPortFrom(addr, uint16(port)), iface: string(iface)}, nil
}

// rewrite points the outbound request at the sandbox, keeping the client's Host
// header and adding X-Forwarded-* headers.
func rewrite(pr *httputil.ProxyRequest) {
	pt := pr.In.Context().Value(proxyTargetKey{}).(*proxyTarget)
	pr.Out.URL.Scheme = "http"
	if pt.https {
		pr.Out.URL.Scheme = "https"
	}
	pr.Out.URL.Host = upstreamHost(pt.id, pt.addr, pt.iface, pt.port)
	pr.Out.Host = pt.host
	pr.SetXForwarded()
}

// newTransport builds the HTTP/1.1-only upstream transport: no proxy from the
// environment, no compression negotiation (bodies pass through untouched), no
// response-header timeout (executions and streams are long-lived).
func (g *Gateway) newTransport(dialTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return g.dialUpstream(ctx, d, network, addr)
		},
		// Ports listed in httpsPorts: TLS to the sandbox, certificates not
		// verified (the service's own, often self-signed; E2B does the same).
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return g.dialUpstreamTLS(ctx, d, network, addr)
		},
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      64 << 10,
	}
}

// dialError marks failures to connect to the sandbox (refused, timed out, no route).
type dialError struct{ err error }

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// dialUpstream connects to the sandbox named by a synthetic upstream host,
// bound to its host interface, and registers the connection under the sandbox
// until it is closed.
func (g *Gateway) dialUpstream(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	up, err := parseUpstreamHost(addr)
	if err != nil {
		return nil, &dialError{err}
	}
	c, err := linkdial.Dialer(d, up.iface).DialContext(ctx, network, up.ap.String())
	if err != nil {
		return nil, &dialError{fmt.Errorf("dial sandbox %s at %s: %w", up.id, up.ap, err)}
	}
	tc := &trackedConn{Conn: c, id: up.id, reg: g.reg}
	g.reg.add(up.id, tc)
	return tc, nil
}

// dialUpstreamTLS is dialUpstream with TLS on top, the request's Host as the
// server name, the certificate not verified.
func (g *Gateway) dialUpstreamTLS(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
	c, err := g.dialUpstream(ctx, d, network, addr)
	if err != nil {
		return nil, err
	}
	sni := ""
	if pt, ok := ctx.Value(proxyTargetKey{}).(*proxyTarget); ok {
		if h, _, err := net.SplitHostPort(pt.host); err == nil {
			sni = h
		} else {
			sni = pt.host
		}
	}
	if _, err := netip.ParseAddr(sni); err == nil {
		sni = "" // no IP literals in SNI (RFC 6066)
	}
	tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) // E2B does not verify either
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, &dialError{fmt.Errorf("TLS to sandbox port: %w", err)}
	}
	return tc, nil
}

// proxyError answers a failed upstream round trip (before response headers).
func (g *Gateway) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	pt := r.Context().Value(proxyTargetKey{}).(*proxyTarget)
	err = withoutQuery(err)
	if pt.stream.killed.Load() || r.Context().Err() != nil {
		// Sandbox closed (serveRoute aborts the stream) or client gone: nothing to say.
		g.log.Debug("proxy aborted", "sandbox", pt.id, "port", pt.port, "err", err)
		return
	}
	var de *dialError
	if errors.As(err, &de) {
		g.log.Debug("sandbox unreachable", "sandbox", pt.id, "port", pt.port, "err", err)
		writeNotFound(w, pt.id)
		return
	}
	g.log.Warn("proxy to sandbox failed", "sandbox", pt.id, "port", pt.port, "err", err)
	writeJSON(w, http.StatusBadGateway, sandboxError{SandboxID: pt.id, Message: "The sandbox did not return a valid response", Code: http.StatusBadGateway})
}

// sandboxError is E2B's proxy error body; field order matters to byte-exact clients.
type sandboxError struct {
	SandboxID string `json:"sandboxId"`
	Message   string `json:"message"`
	Code      int    `json:"code"`
}

// apiError is the {"code","message"} error body (docs/wire/e2b-api.md §2.1).
type apiError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeNotFound answers 502 {"sandboxId":"<id>","message":"The sandbox was not found","code":502}
// (docs/wire/e2b-api.md §1.3): the SDKs treat exactly this as "not running / killed".
func writeNotFound(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusBadGateway, sandboxError{SandboxID: id, Message: "The sandbox was not found", Code: http.StatusBadGateway})
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Code: code, Message: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		code, body = http.StatusInternalServerError, []byte(`{"code":500,"message":"encode error"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// withoutQuery drops the query from the URL a transport error names, so logs
// never hold a signed /files URL's signature (a credential until it expires).
func withoutQuery(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	u, perr := url.Parse(ue.URL)
	if perr != nil {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	u.RawQuery, u.ForceQuery = "", false
	return &url.Error{Op: ue.Op, URL: u.String(), Err: ue.Err}
}
