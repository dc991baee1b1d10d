package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"golang.org/x/net/proxy"

	"github.com/cubby-dev/cubby/internal/egress/policy"
)

// Serve accepts steered connections on ln until it is closed. Each is handled
// by protocol, from the port the sandbox connected to: 443 TLS, 80 HTTP,
// anything else (an upstream SOCKS5 proxy steers all TCP) plain TCP.
func (p *Proxy) Serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go p.handle(c)
	}
}

// session is one steered connection of a sandbox.
type session struct {
	p      *Proxy
	sb     *sandbox
	client net.Conn

	mu       sync.Mutex
	upstream net.Conn
	upKey    string     // what upstream is connected to (name or address)
	upTo     string     // the address it went to
	name     string     // the name the current request or connection asks for
	dst      netip.Addr // the address the sandbox connected to
	aborted  bool
}

func (p *Proxy) handle(c net.Conn) {
	defer c.Close()
	from := addrOf(c.RemoteAddr())
	sb, _ := p.lookup(from)
	orig, err := p.cfg.OriginalDst(c)
	if sb == nil || err != nil {
		p.emit(Event{Sandbox: idOf(sb), Kind: KindTCP, Dst: orig.String(), Reason: fmt.Sprintf("unknown sandbox %s", from)})
		reset(c)
		return
	}
	s := &session{p: p, sb: sb, client: c, dst: orig.Addr()}
	if !p.track(sb, s) {
		p.emit(Event{Sandbox: sb.id, Kind: KindTCP, Dst: orig.String(), Reason: "too many connections"})
		reset(c)
		return
	}
	defer p.untrack(sb, s)
	defer s.closeUpstream()
	switch orig.Port() {
	case 443:
		s.serveTLS(orig)
	case 80:
		s.serveHTTPPort(orig)
	default:
		s.serveTCP(orig, c)
	}
}

func idOf(sb *sandbox) string {
	if sb == nil {
		return ""
	}
	return sb.id
}

// policy returns the sandbox's current policy; nil once it is removed.
func (s *session) policy() *policy.Policy { return s.p.policyOf(s.sb) }

// deny reports a refusal and resets the client.
func (s *session) deny(kind, host string, dst netip.AddrPort, rule, reason string) {
	s.p.emit(Event{Sandbox: s.sb.id, Kind: kind, Host: host, Dst: dst.String(), Rule: rule, Reason: reason})
	s.abort()
}

// serveTCP decides a connection without a name (by address only) and splices
// it to its destination; client reads from in.
func (s *session) serveTCP(orig netip.AddrPort, in io.Reader) {
	pol := s.policy()
	if pol == nil {
		s.deny(KindTCP, "", orig, "", "sandbox removed")
		return
	}
	d := pol.Decide("", orig.Addr())
	if !d.Allow {
		s.deny(KindTCP, "", orig, d.Rule, "denied")
		return
	}
	up, to, err := s.dial(pol, "", orig)
	if err != nil {
		s.deny(KindTCP, "", orig, d.Rule, err.Error())
		return
	}
	s.p.emit(Event{Sandbox: s.sb.id, Allow: true, Kind: KindTCP, Dst: to, Rule: d.Rule})
	splice(s.client, in, up, up)
}

// errBoundary is returned by dial for destinations that are never dialed.
var errBoundary = errors.New("destination is inside the host's boundary (host, sandboxes, loopback, link-local)")

// dial connects to name (resolved by the proxy, preferring the address the
// sandbox used when it is among the answers) or, with name "", to orig; over
// the policy's SOCKS5 proxy when it has one (which then resolves the name).
// It returns the connection and where it went.
func (s *session) dial(pol *policy.Policy, name string, orig netip.AddrPort) (net.Conn, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.p.cfg.DialTimeout)
	defer cancel()
	target := orig
	if name != "" {
		addr, err := s.p.resolve(ctx, name, orig.Addr())
		if err != nil {
			return nil, name, err
		}
		target = netip.AddrPortFrom(addr, orig.Port())
	}
	if s.p.inBoundary(target.Addr()) {
		return nil, target.String(), errBoundary
	}
	var d Dialer = s.p.cfg.Dialer
	address := target.String()
	if pol.Proxy != nil {
		sd, err := socks(pol.Proxy, s.p.cfg.Dialer)
		if err != nil {
			return nil, address, err
		}
		d = sd
		if name != "" { // remote DNS (ATYP=domain), as the address check passed
			address = net.JoinHostPort(name, strconv.Itoa(int(orig.Port())))
		}
	}
	c, err := d.DialContext(ctx, "tcp4", address)
	if err != nil {
		return nil, address, fmt.Errorf("connect %s: %w", address, err)
	}
	return c, address, nil
}

// resolve returns an address of name: prefer, when among the answers, else
// the first IPv4 answer.
func (p *Proxy) resolve(ctx context.Context, name string, prefer netip.Addr) (netip.Addr, error) {
	addrs, err := p.cfg.Resolver.LookupNetIP(ctx, "ip4", name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %s: %w", name, err)
	}
	var first netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if a == prefer {
			return a, nil
		}
		if !first.IsValid() && a.Is4() {
			first = a
		}
	}
	if !first.IsValid() {
		return netip.Addr{}, fmt.Errorf("resolve %s: no IPv4 address", name)
	}
	return first, nil
}

// socks returns a dialer through the SOCKS5 proxy up, reached through forward.
func socks(up *policy.Upstream, forward Dialer) (Dialer, error) {
	var auth *proxy.Auth
	if up.Username != "" {
		auth = &proxy.Auth{User: up.Username, Password: up.Password}
	}
	d, err := proxy.SOCKS5("tcp", up.Address, auth, forwardDialer{forward})
	if err != nil {
		return nil, fmt.Errorf("socks5 proxy %s: %w", up.Address, err)
	}
	cd, ok := d.(Dialer)
	if !ok {
		return nil, errors.New("socks5 dialer without DialContext")
	}
	return cd, nil
}

// forwardDialer adapts a Dialer to x/net/proxy's Dialer and ContextDialer.
type forwardDialer struct{ Dialer }

// Dial dials without a deadline of its own (x/net/proxy's Dialer).
func (f forwardDialer) Dial(network, address string) (net.Conn, error) {
	return f.DialContext(context.Background(), network, address)
}

// setTarget records what the session is connected for (rechecked on updates).
func (s *session) setTarget(name string, dst netip.Addr) {
	s.mu.Lock()
	s.name, s.dst = name, dst
	s.mu.Unlock()
}

// recheck aborts the session when pol no longer allows its target.
func (s *session) recheck(pol *policy.Policy) {
	s.mu.Lock()
	name, dst := s.name, s.dst
	s.mu.Unlock()
	if d := pol.Decide(name, dst); !d.Allow {
		s.p.emit(Event{Sandbox: s.sb.id, Kind: KindTCP, Host: name, Dst: dst.String(), Rule: d.Rule, Reason: "cut: the new policy denies it"})
		s.abort()
	}
}

// abort resets the client and closes the upstream.
func (s *session) abort() {
	s.mu.Lock()
	s.aborted = true
	up := s.upstream
	s.mu.Unlock()
	reset(s.client)
	if up != nil {
		_ = up.Close()
	}
}

// setUpstream replaces the session's upstream (closing the old one); false
// when the session was aborted meanwhile (c is then closed).
func (s *session) setUpstream(c net.Conn, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.upstream != nil {
		_ = s.upstream.Close()
	}
	s.upstream, s.upKey = c, key
	if s.aborted && c != nil {
		_ = c.Close()
		return false
	}
	return true
}

func (s *session) closeUpstream() { s.setUpstream(nil, "") }

// reset closes c with a TCP reset (SO_LINGER 0) when it is a TCP connection.
func reset(c net.Conn) {
	if tc, ok := underlyingTCP(c); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

func underlyingTCP(c net.Conn) (*net.TCPConn, bool) {
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v, true
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil, false
		}
	}
}

func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// splice copies both ways between the client (reading from in, writing to
// cw) and up (reading from upIn) until either side ends, then closes both.
func splice(cw net.Conn, in io.Reader, up net.Conn, upIn io.Reader) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(up, in)
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(cw, upIn)
		closeWrite(cw)
		done <- struct{}{}
	}()
	<-done
	<-done
	_ = up.Close()
	_ = cw.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// bufferedConn is a net.Conn whose reads come from r (bytes already read
// from it, then the connection).
type bufferedConn struct {
	net.Conn
	r io.Reader
}

// Read reads what was buffered, then the connection.
func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// NetConn returns the wrapped connection.
func (b *bufferedConn) NetConn() net.Conn { return b.Conn }
