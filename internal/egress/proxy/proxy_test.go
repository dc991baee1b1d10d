package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/egress/ca"
	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/testenv/testinternet"
)

// Addresses of the test world: each "internet" address has an HTTP server on
// port 80 and an HTTPS one on 443 that answer with their own address.
var (
	allowedIP  = netip.MustParseAddr("198.18.0.2")
	deniedIP   = netip.MustParseAddr("198.18.0.3")
	echoIP     = netip.MustParseAddr("198.18.0.4")
	attackerIP = netip.MustParseAddr("203.0.113.66")
	sandboxA   = netip.MustParseAddr("127.0.0.2")
	subnet     = netip.MustParsePrefix("10.99.0.0/16")
)

// world is a Proxy with fake internet servers on loopback behind it.
type world struct {
	t       *testing.T
	p       *Proxy
	proxyLn net.Listener
	echo    *testinternet.Echo
	egress  *ca.Authority
	routes  map[netip.AddrPort]string // fake address -> real loopback address
	secrets map[string]string

	mu     sync.Mutex
	orig   map[string]netip.AddrPort // client local address -> original destination
	events []Event
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{t: t, echo: &testinternet.Echo{}, routes: map[netip.AddrPort]string{}, orig: map[string]netip.AddrPort{},
		secrets: map[string]string{"key": "sk-test-1234567890"}}
	testCA, err := testinternet.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := testCA.ServerCert("allowed.test", "denied.test", "echo.test", "*.wild.test")
	if err != nil {
		t.Fatal(err)
	}
	for _, ip := range []netip.Addr{allowedIP, deniedIP, echoIP, attackerIP} {
		h := &testinternet.Echo{Name: ip.String()}
		if ip == echoIP {
			h = w.echo
			h.Name = ip.String()
		}
		plain := httptest.NewServer(h)
		t.Cleanup(plain.Close)
		secure := httptest.NewUnstartedServer(h)
		secure.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		secure.StartTLS()
		t.Cleanup(secure.Close)
		w.routes[netip.AddrPortFrom(ip, 80)] = plain.Listener.Addr().String()
		w.routes[netip.AddrPortFrom(ip, 443)] = secure.Listener.Addr().String()
	}
	dir := t.TempDir()
	if w.egress, err = ca.LoadOrCreate(filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key"), "test egress CA"); err != nil {
		t.Fatal(err)
	}
	w.p, err = New(Config{Dialer: w, Resolver: w, Boundary: []netip.Prefix{subnet}, CA: w.egress,
		UpstreamRoots: testCA.Pool(), Secrets: w, Events: w.event, OriginalDst: w.originalDst,
		HeaderTimeout: 2 * time.Second, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if w.proxyLn, err = net.Listen("tcp4", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.proxyLn.Close() })
	go w.p.Serve(w.proxyLn)
	return w
}

// DialContext implements Dialer: fake addresses go to their loopback server.
func (w *world) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	real, ok := w.routes[netip.MustParseAddrPort(address)]
	if !ok {
		return nil, fmt.Errorf("no route to %s", address)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp4", real)
}

// LookupNetIP implements Resolver.
func (w *world) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	names := map[string]netip.Addr{"allowed.test": allowedIP, "denied.test": deniedIP, "echo.test": echoIP,
		"a.wild.test": allowedIP, "loop.test": netip.MustParseAddr("127.0.0.1"), "inside.test": netip.MustParseAddr("10.99.0.5")}
	if a, ok := names[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, errors.New("no such host")
}

// SecretValue implements Secrets.
func (w *world) SecretValue(_ context.Context, _, name string) (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v, ok := w.secrets[name]; ok {
		return v, nil
	}
	return "", policy.ErrUnknownSecret
}

func (w *world) event(e Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, e)
}

// lastEvent returns the last event about host.
func (w *world) lastEvent(host string) (Event, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.events) - 1; i >= 0; i-- {
		if w.events[i].Host == host {
			return w.events[i], true
		}
	}
	return Event{}, false
}

func (w *world) originalDst(c net.Conn) (netip.AddrPort, error) {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		w.mu.Lock()
		ap, ok := w.orig[c.RemoteAddr().String()]
		w.mu.Unlock()
		if ok {
			return ap, nil
		}
	}
	return netip.AddrPort{}, errors.New("no original destination")
}

// connect opens a connection from sandbox address from "to" dst (through the proxy).
func (w *world) connect(from netip.Addr, dst netip.AddrPort) net.Conn {
	w.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp4", w.proxyLn.Addr().String())
	if err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	w.orig[c.LocalAddr().String()] = dst
	w.mu.Unlock()
	w.t.Cleanup(func() { c.Close() })
	return c
}

func (w *world) set(id string, addr netip.Addr, s policy.Spec) {
	w.t.Helper()
	pol, err := policy.Parse(s)
	if err != nil {
		w.t.Fatal(err)
	}
	w.p.Set(id, addr, pol)
}

// get sends GET path with Host host over c and returns status and body.
func get(t *testing.T, c net.Conn, host, path string) (int, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func server(t *testing.T, body string) string {
	t.Helper()
	var v struct{ Server string }
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("not an echo answer: %q", body)
	}
	return v.Server
}

var denyAll = []string{policy.AllTraffic}

func TestHTTPDecidedOnEveryRequestsHost(t *testing.T) {
	w := newWorld(t)
	w.set("a", sandboxA, policy.Spec{AllowOut: []string{"allowed.test"}, DenyOut: denyAll})
	c := w.connect(sandboxA, netip.AddrPortFrom(allowedIP, 80))
	if code, body := get(t, c, "allowed.test", "/"); code != 200 || server(t, body) != allowedIP.String() {
		t.Fatalf("allowed: %d %s", code, body)
	}
	if code, body := get(t, c, "denied.test", "/"); code != 403 || !strings.Contains(body, "denyOut[0]") {
		t.Fatalf("second request on the same connection for a denied host: %d %s", code, body)
	}
	if e, ok := w.lastEvent("denied.test"); !ok || e.Allow || e.Rule != "denyOut[0] 0.0.0.0/0" || e.Sandbox != "a" {
		t.Fatalf("denial event: %+v", e)
	}
	// The sandbox's DNS said otherwise: the request still goes to allowed.test.
	c = w.connect(sandboxA, netip.AddrPortFrom(attackerIP, 80))
	if code, body := get(t, c, "allowed.test", "/"); code != 200 || server(t, body) != allowedIP.String() {
		t.Fatalf("allowed name at the attacker's address: %d %s", code, body)
	}
	c = w.connect(sandboxA, netip.AddrPortFrom(allowedIP, 80))
	fmt.Fprintf(c, "GET http://denied.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 403 {
		t.Fatalf("an absolute URI names the host (RFC 9112 3.2.2), not the Host header: %v %v", resp, err)
	}
}

// tlsGet makes an HTTPS request for host over c with server name sni,
// trusting roots.
func tlsGet(t *testing.T, c net.Conn, sni, host string, roots *x509.CertPool) (int, string, error) {
	t.Helper()
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: roots, InsecureSkipVerify: sni == ""})
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		return 0, "", err
	}
	code, body := get(t, tc, host, "/")
	if code == 0 {
		return 0, "", errors.New(body)
	}
	return code, body, nil
}

func TestTLSPassthroughBySNI(t *testing.T) {
	w := newWorld(t)
	w.set("a", sandboxA, policy.Spec{AllowOut: []string{"allowed.test", "*.wild.test"}, DenyOut: denyAll})
	roots := w.p.cfg.UpstreamRoots
	for _, dst := range []netip.Addr{allowedIP, attackerIP} {
		c := w.connect(sandboxA, netip.AddrPortFrom(dst, 443))
		code, body, err := tlsGet(t, c, "allowed.test", "allowed.test", roots)
		if err != nil || code != 200 || server(t, body) != allowedIP.String() {
			t.Fatalf("SNI allowed.test to %s: %d %q %v", dst, code, body, err)
		}
	}
	c := w.connect(sandboxA, netip.AddrPortFrom(allowedIP, 443))
	if code, _, err := tlsGet(t, c, "a.wild.test", "a.wild.test", roots); err != nil || code != 200 {
		t.Fatalf("wildcard: %d %v", code, err)
	}
	for _, sni := range []string{"denied.test", ""} {
		c := w.connect(sandboxA, netip.AddrPortFrom(deniedIP, 443))
		if _, _, err := tlsGet(t, c, sni, "denied.test", roots); err == nil {
			t.Fatalf("SNI %q to a denied address got through", sni)
		}
	}
	if e, ok := w.lastEvent("denied.test"); !ok || e.Allow || e.Kind != KindTLS {
		t.Fatalf("TLS denial event: %+v", e)
	}
}

func egressRoots(w *world) *x509.CertPool {
	p := x509.NewCertPool()
	p.AppendCertsFromPEM(w.egress.CertPEM())
	return p
}

func TestRulesInjectSecretsAndMaskThem(t *testing.T) {
	w := newWorld(t)
	w.set("a", sandboxA, policy.Spec{AllowOut: []string{"echo.test"}, DenyOut: denyAll,
		Rules: map[string][]policy.Transform{"echo.test": {{Headers: map[string]string{
			"Authorization": "Bearer ${e2b.secrets.key}", "X-Team": "blue"}}}}})
	c := w.connect(sandboxA, netip.AddrPortFrom(echoIP, 443))
	code, body, err := tlsGet(t, c, "echo.test", "echo.test", egressRoots(w))
	if err != nil || code != 200 {
		t.Fatalf("terminated request: %d %v", code, err)
	}
	seen := w.echo.Seen("echo.test")
	if len(seen) != 1 || seen[0].Get("Authorization") != "Bearer sk-test-1234567890" || seen[0].Get("X-Team") != "blue" {
		t.Fatalf("the host got %v", seen)
	}
	if strings.Contains(body, "sk-test") || !strings.Contains(body, "Bearer ******************") {
		t.Fatalf("the echoed secret reached the sandbox: %s", body)
	}
	tc := tls.Client(w.connect(sandboxA, netip.AddrPortFrom(echoIP, 443)), &tls.Config{ServerName: "echo.test", RootCAs: egressRoots(w)})
	if code, _ := get(t, tc, "denied.test", "/"); code != http.StatusMisdirectedRequest {
		t.Fatalf("another Host inside a terminated connection: %d", code)
	}
	w.mu.Lock()
	delete(w.secrets, "key")
	w.mu.Unlock()
	c = w.connect(sandboxA, netip.AddrPortFrom(echoIP, 443))
	if code, body, err := tlsGet(t, c, "echo.test", "echo.test", egressRoots(w)); code != 502 || !strings.Contains(body, "unknown secret") {
		t.Fatalf("deleted secret: %d %q %v", code, body, err)
	}
	if n := len(w.echo.Seen("echo.test")); n != 1 {
		t.Fatalf("a request with a missing secret reached the host (%d requests)", n)
	}
}

func TestMaskReaderSplitValues(t *testing.T) {
	src := strings.Repeat("x", 10) + "SECRET" + strings.Repeat("y", 3) + "SEC" + "RET"
	for _, chunk := range []int{1, 2, 5, 64} {
		r := &maskReader{r: io.NopCloser(&chunkReader{s: src, n: chunk}), values: [][]byte{[]byte("SECRET")}}
		got, err := io.ReadAll(r)
		want := strings.Repeat("x", 10) + "******" + "yyy" + "******"
		if err != nil || string(got) != want {
			t.Fatalf("chunk %d: %q %v", chunk, got, err)
		}
	}
}

type chunkReader struct {
	s string
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.s == "" {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.s)
	c.s = c.s[n:]
	return n, nil
}

func TestUpdateCutsLiveConnections(t *testing.T) {
	w := newWorld(t)
	w.set("a", sandboxA, policy.Spec{AllowOut: []string{"allowed.test"}, DenyOut: denyAll})
	c := w.connect(sandboxA, netip.AddrPortFrom(allowedIP, 80))
	fmt.Fprintf(c, "GET /stream?n=1000&ms=20 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
	br := bufio.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("stream start: %q %v", line, err)
	}
	w.set("a", sandboxA, policy.Spec{AllowOut: []string{"other.test"}, DenyOut: denyAll})
	start := time.Now()
	for {
		if _, err := br.ReadString('\n'); err != nil {
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatal("a stream to a newly denied host kept flowing")
		}
	}
	w.p.Remove("a")
	c = w.connect(sandboxA, netip.AddrPortFrom(allowedIP, 80))
	if code, _ := get(t, c, "allowed.test", "/"); code != 0 {
		t.Fatalf("removed sandbox: %d, want a reset", code)
	}
}

func TestBoundaryAndUnknownSandbox(t *testing.T) {
	w := newWorld(t)
	c := w.connect(sandboxA, netip.AddrPortFrom(allowedIP, 80))
	if code, _ := get(t, c, "allowed.test", "/"); code != 0 {
		t.Fatalf("unknown sandbox got an answer: %d", code)
	}
	w.set("a", sandboxA, policy.Spec{AllowOut: []string{"loop.test", "inside.test"}, DenyOut: denyAll})
	for _, host := range []string{"loop.test", "inside.test"} {
		c := w.connect(sandboxA, netip.AddrPortFrom(allowedIP, 80))
		if code, body := get(t, c, host, "/"); code != 502 || !strings.Contains(body, "boundary") {
			t.Fatalf("%s: %d %s", host, code, body)
		}
	}
	w.set("a", sandboxA, policy.Spec{})
	c = w.connect(sandboxA, netip.AddrPortFrom(netip.MustParseAddr("10.99.0.1"), 5432))
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a connection into the sandbox subnet: %v, want a reset", err)
	}
}

func TestSOCKS5Upstream(t *testing.T) {
	w := newWorld(t)
	s := &testinternet.SOCKS5{User: "u", Password: "p", Dial: func(network, address string) (net.Conn, error) {
		host, port, _ := net.SplitHostPort(address)
		if a, err := w.LookupNetIP(context.Background(), "ip4", host); err == nil {
			address = net.JoinHostPort(a[0].String(), port)
		}
		return w.DialContext(context.Background(), network, address)
	}}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go s.Serve(ln)
	socksAt := netip.MustParseAddrPort("198.18.0.9:1080")
	w.routes[socksAt] = ln.Addr().String()
	w.set("a", sandboxA, policy.Spec{AllowOut: []string{"allowed.test"}, DenyOut: denyAll,
		EgressProxy: &policy.Upstream{Address: socksAt.String(), Username: "u", Password: "p"}})
	c := w.connect(sandboxA, netip.AddrPortFrom(allowedIP, 80))
	if code, body := get(t, c, "allowed.test", "/"); code != 200 || server(t, body) != allowedIP.String() {
		t.Fatalf("through SOCKS5: %d %s", code, body)
	}
	if got := s.Targets(); len(got) != 1 || got[0] != "allowed.test:80" {
		t.Fatalf("SOCKS5 targets %v, want the name (remote DNS)", got)
	}
	w.set("a", sandboxA, policy.Spec{EgressProxy: &policy.Upstream{Address: socksAt.String(), Username: "u", Password: "wrong"}})
	c = w.connect(sandboxA, netip.AddrPortFrom(allowedIP, 80))
	if code, _ := get(t, c, "allowed.test", "/"); code != 502 {
		t.Fatalf("a proxy refusing us must fail the request closed: %d", code)
	}
}

func TestDNSFilter(t *testing.T) {
	w := newWorld(t)
	up := &testinternet.DNSServer{Names: testinternet.Names{"allowed.test": allowedIP, "denied.test": deniedIP}}
	upPC, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer upPC.Close()
	go up.Serve(upPC)
	w.p.cfg.DNSUpstreams = []netip.AddrPort{netip.MustParseAddrPort(upPC.LocalAddr().String())}
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go w.p.ServeDNS(pc)
	w.set("a", sandboxA, policy.Spec{AllowOut: []string{"allowed.test"}, DenyOut: denyAll})
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.UDPAddr{IP: sandboxA.AsSlice()}}
		return d.DialContext(ctx, "udp4", pc.LocalAddr().String())
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got, err := r.LookupNetIP(ctx, "ip4", "allowed.test"); err != nil || len(got) != 1 || got[0] != allowedIP {
		t.Fatalf("allowed name: %v %v", got, err)
	}
	if got, err := r.LookupNetIP(ctx, "ip4", "denied.test"); err == nil {
		t.Fatalf("denied name resolved to %v", got)
	}
	for _, name := range up.Asked() {
		if name == "denied.test" {
			t.Fatal("a denied name was forwarded upstream (DNS carries data out)")
		}
	}
	if e, ok := w.lastEvent("denied.test"); !ok || e.Allow || e.Kind != KindDNS {
		t.Fatalf("DNS denial event: %+v", e)
	}
}
