package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/egress/policy"
)

// maxRequestLine bounds the first line looked at to tell HTTP from other
// protocols on port 80.
const maxRequestLine = 8 << 10

// serveHTTPPort serves a connection to port 80: HTTP/1.x requests one by one,
// anything else as plain TCP.
func (s *session) serveHTTPPort(orig netip.AddrPort) {
	br := bufio.NewReaderSize(s.client, maxRequestLine)
	_ = s.client.SetReadDeadline(time.Now().Add(s.p.cfg.HeaderTimeout))
	line, err := peekLine(br)
	_ = s.client.SetReadDeadline(time.Time{})
	if err != nil && len(line) == 0 {
		s.deny(KindHTTP, "", orig, "", "no request: "+err.Error())
		return
	}
	if !looksLikeHTTP(line) {
		s.serveTCP(orig, br)
		return
	}
	s.serveHTTPFrom(&bufferedConn{Conn: s.client, r: br}, br, orig, "")
}

// peekLine returns the buffered first line (up to maxRequestLine bytes),
// reading only as much as has to arrive for it.
func peekLine(br *bufio.Reader) ([]byte, error) {
	want := 1
	for {
		b, err := br.Peek(want)
		b, _ = br.Peek(br.Buffered())
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			return b[:i+1], nil
		}
		if err != nil || len(b) >= maxRequestLine {
			return b, err
		}
		want = len(b) + 1
	}
}

// looksLikeHTTP reports whether line is an HTTP/1.x request line.
func looksLikeHTTP(line []byte) bool {
	f := strings.Fields(string(line))
	return len(f) == 3 && strings.HasPrefix(f[2], "HTTP/1.") && f[0] != "" && strings.ToUpper(f[0]) == f[0]
}

// serveHTTP serves HTTP/1.1 requests on client (a terminated TLS connection
// when tlsName is set: every request must then be for that host).
func (s *session) serveHTTP(client net.Conn, orig netip.AddrPort, tlsName string) {
	s.serveHTTPFrom(client, bufio.NewReader(client), orig, tlsName)
}

func (s *session) serveHTTPFrom(client net.Conn, br *bufio.Reader, orig netip.AddrPort, tlsName string) {
	var up *bufio.Reader
	for first := true; ; first = false {
		wait := defaultIdleTimeout
		if first {
			wait = s.p.cfg.HeaderTimeout
		}
		_ = client.SetReadDeadline(time.Now().Add(wait))
		req, err := http.ReadRequest(br)
		_ = client.SetReadDeadline(time.Time{})
		if err != nil {
			return
		}
		var more bool
		up, more = s.forward(client, br, req, orig, tlsName, up)
		if !more {
			return
		}
	}
}

// forward decides one request, sends it upstream (a new upstream connection
// when it goes elsewhere than the last one) and relays the response. It
// returns the upstream reader and whether the session may go on.
func (s *session) forward(client net.Conn, br *bufio.Reader, req *http.Request, orig netip.AddrPort, tlsName string, up *bufio.Reader) (*bufio.Reader, bool) {
	defer req.Body.Close()
	host, err := requestHost(req)
	switch {
	case err != nil:
		return up, s.respond(client, req, http.StatusBadRequest, err.Error())
	case tlsName != "" && host != tlsName:
		s.p.emit(Event{Sandbox: s.sb.id, Kind: KindHTTP, Host: host, Dst: orig.String(), Reason: "Host differs from the TLS server name " + tlsName})
		return up, s.respond(client, req, http.StatusMisdirectedRequest, fmt.Sprintf("this connection is for %s, not %s", tlsName, host))
	}
	pol := s.policy()
	if pol == nil {
		s.abort()
		return up, false
	}
	d := pol.Decide(host, orig.Addr())
	rule, hasRule := pol.RuleFor(host)
	if !d.Allow {
		s.p.emit(Event{Sandbox: s.sb.id, Kind: KindHTTP, Host: host, Dst: orig.String(), Rule: d.Rule, Reason: "denied"})
		return up, s.respond(client, req, http.StatusForbidden, fmt.Sprintf("%s is not allowed by this sandbox's egress policy (%s)", host, d.Rule))
	}
	s.setTarget(host, orig.Addr())
	up, err = s.upstreamFor(pol, host, d.ByName || hasRule, orig, tlsName, up)
	if err != nil {
		s.p.emit(Event{Sandbox: s.sb.id, Kind: KindHTTP, Host: host, Dst: orig.String(), Rule: d.Rule, Reason: err.Error()})
		return up, s.respond(client, req, http.StatusBadGateway, "cannot reach "+host+": "+err.Error())
	}
	masked, err := s.applyRule(req, rule, hasRule)
	if err != nil {
		s.p.emit(Event{Sandbox: s.sb.id, Kind: KindHTTP, Host: host, Dst: orig.String(), Rule: d.Rule, Reason: err.Error()})
		return up, s.respond(client, req, http.StatusBadGateway, "the egress rule for "+host+" cannot be applied: "+err.Error())
	}
	s.p.emit(Event{Sandbox: s.sb.id, Allow: true, Kind: KindHTTP, Host: host, Dst: s.upstreamTo(), Rule: d.Rule, Reason: ruleNote(hasRule, rule)})
	return up, s.relay(client, br, req, up, masked)
}

func ruleNote(has bool, r policy.HostRule) string {
	if !has {
		return ""
	}
	return fmt.Sprintf("headers set by rule %s", r.Pattern)
}

// requestHost returns the canonical host a request is for: its Host header,
// which an absolute request URI must agree with.
func requestHost(req *http.Request) (string, error) {
	host := policy.CanonicalName(req.Host)
	if host == "" {
		return "", errors.New("the request has no Host header")
	}
	if req.URL.IsAbs() || req.URL.Host != "" {
		if policy.CanonicalName(req.URL.Host) != host {
			return "", errors.New("the request URI names another host than the Host header")
		}
		req.URL.Scheme, req.URL.Host = "", ""
	}
	return host, nil
}

// upstreamFor returns a reader on the upstream connection for host (by name)
// or orig, reusing the current one when it goes to the same place.
func (s *session) upstreamFor(pol *policy.Policy, host string, byName bool, orig netip.AddrPort, tlsName string, up *bufio.Reader) (*bufio.Reader, error) {
	key := orig.String()
	name := ""
	if byName {
		key, name = "name:"+host, host
	}
	if up != nil && s.upstreamKey() == key {
		return up, nil
	}
	c, to, err := s.dial(pol, name, orig)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.upTo = to
	s.mu.Unlock()
	if tlsName != "" {
		if c, err = s.tlsUpstream(c, tlsName); err != nil {
			return nil, fmt.Errorf("TLS to %s: %w", tlsName, err)
		}
	}
	if !s.setUpstream(c, key) {
		return nil, errors.New("connection cut")
	}
	return bufio.NewReaderSize(c, 64<<10), nil
}

func (s *session) upstreamKey() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upKey
}

// upstreamTo is where the current upstream connection went.
func (s *session) upstreamTo() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upTo
}

func (s *session) upstreamConn() net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.upstream
}

// applyRule sets the rule's headers on req, secrets filled in, and returns
// the secret values used (to be masked in the response). Requests carrying
// secrets ask for an uncompressed response so masking sees the bytes.
func (s *session) applyRule(req *http.Request, rule policy.HostRule, has bool) ([]string, error) {
	if !has {
		return nil, nil
	}
	var used []string
	lookup := func(name string) (string, error) {
		if s.p.cfg.Secrets == nil {
			return "", fmt.Errorf("secret %q: %w", name, policy.ErrUnknownSecret)
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.p.cfg.DialTimeout)
		defer cancel()
		v, err := s.p.cfg.Secrets.SecretValue(ctx, s.sb.id, name)
		if err != nil {
			return "", err
		}
		used = append(used, v)
		return v, nil
	}
	for _, h := range rule.Headers {
		v, err := h.Value.Expand(lookup)
		if err != nil {
			return nil, err
		}
		req.Header[h.Name] = []string{v}
	}
	if len(used) > 0 {
		req.Header.Set("Accept-Encoding", "identity")
	}
	return used, nil
}

// relay writes req upstream and the response back; false ends the session.
func (s *session) relay(client net.Conn, br *bufio.Reader, req *http.Request, up *bufio.Reader, masked []string) bool {
	upc := s.upstreamConn()
	if upc == nil {
		return false
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // Request.Write would add Go's
	}
	if err := req.Write(upc); err != nil {
		return s.respond(client, req, http.StatusBadGateway, "send request: "+err.Error())
	}
	resp, err := readResponse(up, req, client)
	if err != nil {
		return s.respond(client, req, http.StatusBadGateway, "read response: "+err.Error())
	}
	defer resp.Body.Close()
	mask(resp, masked)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if resp.Write(client) == nil {
			splice(client, br, upc, up)
		}
		return false
	}
	if err := resp.Write(client); err != nil {
		return false
	}
	return !req.Close && !resp.Close
}

// readResponse reads the final response, relaying 1xx ones (but 101) to client.
func readResponse(up *bufio.Reader, req *http.Request, client io.Writer) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(up, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		if err := resp.Write(client); err != nil {
			return nil, err
		}
	}
}

// respond answers req with a plain-text error and reports whether the
// session may go on (never: the client is told the connection closes).
func (s *session) respond(client net.Conn, req *http.Request, status int, msg string) bool {
	body := "cubby egress: " + msg + "\n"
	resp := &http.Response{StatusCode: status, ProtoMajor: 1, ProtoMinor: 1, Request: req, Close: true,
		Header:        http.Header{"Content-Type": {"text/plain; charset=utf-8"}, "X-Cubby-Egress": {"refused"}},
		ContentLength: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}
	_ = resp.Write(client)
	return false
}
