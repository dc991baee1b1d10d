package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/cubby-dev/cubby/internal/egress/policy"
)

// serveTLS reads the ClientHello, decides on its server name, and either
// passes the connection through to the host or, when the host has header
// rules, terminates it to rewrite requests. What is not TLS is plain TCP.
func (s *session) serveTLS(orig netip.AddrPort) {
	name, rec, err := readClientHello(s.client, s.p.cfg.HeaderTimeout)
	in := io.MultiReader(bytes.NewReader(rec), s.client)
	if err != nil {
		if len(rec) == 0 {
			s.deny(KindTLS, "", orig, "", "no ClientHello: "+err.Error())
			return
		}
		s.serveTCP(orig, in)
		return
	}
	pol := s.policy()
	if pol == nil {
		s.deny(KindTLS, name, orig, "", "sandbox removed")
		return
	}
	d := pol.Decide(name, orig.Addr())
	if !d.Allow {
		s.deny(KindTLS, name, orig, d.Rule, "denied")
		return
	}
	s.setTarget(name, orig.Addr())
	if _, ok := pol.RuleFor(name); ok && name != "" {
		s.terminate(&bufferedConn{Conn: s.client, r: in}, name, orig, d.Rule)
		return
	}
	host := ""
	if d.ByName {
		host = name
	}
	up, to, err := s.dial(pol, host, orig)
	if err != nil {
		s.deny(KindTLS, name, orig, d.Rule, err.Error())
		return
	}
	if !s.setUpstream(up, to) {
		return
	}
	s.p.emit(Event{Sandbox: s.sb.id, Allow: true, Kind: KindTLS, Host: name, Dst: to, Rule: d.Rule})
	splice(s.client, in, up, up)
}

// errHello stops the handshake once the ClientHello is read.
var errHello = errors.New("client hello read")

// readClientHello reads a TLS ClientHello from c within timeout and returns
// its server name (canonical; "" without SNI) and every byte read, to be
// replayed. An error means c did not start with a ClientHello.
func readClientHello(c net.Conn, timeout time.Duration) (string, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer func() { _ = c.SetReadDeadline(time.Time{}) }()
	rc := &recordingConn{Conn: c}
	var name string
	var got bool
	err := tls.Server(rc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		name, got = policy.CanonicalName(h.ServerName), true
		return nil, errHello
	}}).Handshake()
	if !got {
		return "", rc.buf.Bytes(), err
	}
	return name, rc.buf.Bytes(), nil
}

// recordingConn records what is read and discards what is written (the
// handshake's alert is not sent to the client).
type recordingConn struct {
	net.Conn
	buf bytes.Buffer
}

// Read reads from the connection and records what it got.
func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

// Write discards p (the handshake is never answered).
func (r *recordingConn) Write(p []byte) (int, error) { return len(p), nil }

// terminate completes the client's handshake with a certificate for name from
// the server's CA and serves its HTTP/1.1 requests (rewritten by the rules)
// over TLS to the real host.
func (s *session) terminate(client net.Conn, name string, orig netip.AddrPort, rule string) {
	if s.p.cfg.CA == nil {
		s.deny(KindTLS, name, orig, rule, "header rules over HTTPS need the egress CA")
		return
	}
	leaf, err := s.p.cfg.CA.Leaf(name)
	if err != nil {
		s.deny(KindTLS, name, orig, rule, err.Error())
		return
	}
	tc := tls.Server(client, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12})
	_ = tc.SetDeadline(time.Now().Add(s.p.cfg.HeaderTimeout))
	if err := tc.Handshake(); err != nil {
		s.deny(KindTLS, name, orig, rule, "client handshake: "+err.Error())
		return
	}
	_ = tc.SetDeadline(time.Time{})
	s.p.emit(Event{Sandbox: s.sb.id, Allow: true, Kind: KindTLS, Host: name, Dst: orig.String(), Rule: rule, Reason: "terminated for header rules"})
	s.serveHTTP(tc, orig, name)
}

// tlsUpstream wraps c in TLS to name, verified against the configured roots.
func (s *session) tlsUpstream(c net.Conn, name string) (net.Conn, error) {
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: s.p.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12})
	_ = tc.SetDeadline(time.Now().Add(s.p.cfg.DialTimeout))
	if err := tc.Handshake(); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = tc.SetDeadline(time.Time{})
	return tc, nil
}
