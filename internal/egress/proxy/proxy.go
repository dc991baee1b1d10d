// Package proxy is the egress proxy: sandboxes' HTTP, TLS and DNS traffic (or
// all their TCP, with an upstream SOCKS5 proxy) arrives here through
// nftables DNAT (package network), and each connection is decided against the
// sandbox's policy (package egress/policy) on the name it asks for: the HTTP
// Host header of every request, the TLS server name (SNI) of the ClientHello.
// DNS answers are never trusted: a connection allowed by name goes to the
// name as this proxy resolves it, not to the address the sandbox connected to.
//
// Allowed connections are dialed through a Dialer the caller provides (in
// Cubby, one that opens sockets in a network namespace wired like a sandbox's,
// so the host's isolation rules apply to them too); destinations in Boundary
// are never dialed. HTTPS to a host with header rules is terminated with a
// certificate from the server's CA and re-encrypted to the real host (whose
// certificate is verified); the rules' ${e2b.secrets.NAME} placeholders are
// filled in per request, and the injected values are masked in what comes
// back, so a host that echoes request headers does not hand them to the
// sandbox. TLS to other hosts passes through untouched.
//
// Connections of an unknown sandbox, and connections nobody allowed, are
// closed with a TCP reset (HTTP requests get a 403 explaining why); a policy
// update cuts the live connections it no longer allows. Every decision is
// reported as an Event.
package proxy

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/egress/ca"
	"github.com/cubby-dev/cubby/internal/egress/policy"
)

// Defaults of Config.
const (
	DefaultHeaderTimeout      = 10 * time.Second // ClientHello, request headers, DNS over TCP
	DefaultDialTimeout        = 10 * time.Second
	DefaultMaxConnsPerSandbox = 1024
	defaultIdleTimeout        = 5 * time.Minute // between requests of a kept-alive HTTP session
)

// Event kinds.
const (
	KindHTTP = "http"
	KindTLS  = "tls"
	KindTCP  = "tcp"
	KindDNS  = "dns"
	// KindIP is a decision nftables took on an address (an allowOut or
	// denyOut entry), for traffic that does not go through the proxy.
	KindIP = "ip"
)

// Event is one decision, for the sandbox's log and the server's counters. It
// never holds header values or secrets.
type Event struct {
	Sandbox string    `json:"sandbox"`
	Time    time.Time `json:"time"`
	Allow   bool      `json:"allow"`
	Kind    string    `json:"kind"`           // KindHTTP, KindTLS, KindTCP, KindDNS or KindIP
	Host    string    `json:"host,omitempty"` // the name asked for
	Dst     string    `json:"dst,omitempty"`  // where the sandbox connected to, or where it went
	Rule    string    `json:"rule,omitempty"` // the policy entry that decided; "" = default
	Reason  string    `json:"reason,omitempty"`
}

// Secrets gives the values of secrets named in rules.
type Secrets interface {
	// SecretValue returns the current value of secret name for sandbox's team.
	// Errors wrap policy.ErrUnknownSecret when it does not exist.
	SecretValue(ctx context.Context, sandbox, name string) (string, error)
}

// Dialer opens connections from where allowed traffic leaves.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Resolver resolves names for allowed-by-name connections (net.Resolver).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Proxy.
type Config struct {
	Dialer   Dialer   // required
	Resolver Resolver // required
	// Boundary lists destinations never dialed, whatever a policy says (the
	// server's sandbox subnet, loopback, link-local ...).
	Boundary []netip.Prefix
	// CA signs the certificates of terminated TLS; nil disables header rules
	// over HTTPS (such connections are refused).
	CA *ca.Authority
	// UpstreamRoots verify hosts of terminated TLS; nil = the system roots.
	UpstreamRoots *x509.CertPool
	Secrets       Secrets
	Events        func(Event) // nil = none; must not block for long
	Log           *slog.Logger
	// DNSUpstreams are the resolvers queries are forwarded to (UDP, then TCP).
	DNSUpstreams []netip.AddrPort
	// OriginalDst returns where a steered connection was going; default: the
	// conntrack original destination (SO_ORIGINAL_DST).
	OriginalDst        func(net.Conn) (netip.AddrPort, error)
	HeaderTimeout      time.Duration
	DialTimeout        time.Duration
	MaxConnsPerSandbox int
}

// Proxy serves steered connections and DNS queries. Safe for concurrent use.
type Proxy struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex
	byAddr map[netip.Addr]*sandbox
	byID   map[string]*sandbox
}

// sandbox is one sandbox the proxy knows.
type sandbox struct {
	id     string
	addr   netip.Addr
	policy *policy.Policy
	conns  map[*session]struct{}
}

// New returns a Proxy for cfg. Errors: a missing Dialer or Resolver.
func New(cfg Config) (*Proxy, error) {
	if cfg.Dialer == nil || cfg.Resolver == nil {
		return nil, errors.New("egress proxy: a dialer and a resolver are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.OriginalDst == nil {
		cfg.OriginalDst = OriginalDst
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.MaxConnsPerSandbox <= 0 {
		cfg.MaxConnsPerSandbox = DefaultMaxConnsPerSandbox
	}
	return &Proxy{cfg: cfg, log: cfg.Log, byAddr: map[netip.Addr]*sandbox{}, byID: map[string]*sandbox{}}, nil
}

// Set gives sandbox id at addr the policy p (nil = no restriction), replacing
// what it had, and closes the live connections p no longer allows.
func (p *Proxy) Set(id string, addr netip.Addr, pol *policy.Policy) {
	if pol == nil {
		pol = &policy.Policy{}
	}
	p.mu.Lock()
	sb := p.byID[id]
	if sb == nil || sb.addr != addr {
		if sb != nil {
			delete(p.byAddr, sb.addr)
		}
		if old := p.byAddr[addr]; old != nil && old.id != id { // an address reused: the old one is gone
			delete(p.byID, old.id)
			defer closeAll(old.sessionsLocked())
		}
		prev := sb
		sb = &sandbox{id: id, addr: addr, conns: map[*session]struct{}{}}
		if prev != nil {
			sb.conns = prev.conns
		}
		p.byID[id], p.byAddr[addr] = sb, sb
	}
	sb.policy = pol
	live := sb.sessionsLocked()
	p.mu.Unlock()
	for _, s := range live {
		s.recheck(pol)
	}
}

// Remove forgets sandbox id and closes its connections.
func (p *Proxy) Remove(id string) {
	p.mu.Lock()
	var live []*session
	if sb := p.byID[id]; sb != nil {
		delete(p.byID, id)
		if p.byAddr[sb.addr] == sb {
			delete(p.byAddr, sb.addr)
		}
		live = sb.sessionsLocked()
	}
	p.mu.Unlock()
	closeAll(live)
}

// lookup returns the sandbox at addr and its current policy.
func (p *Proxy) lookup(addr netip.Addr) (*sandbox, *policy.Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sb := p.byAddr[addr.Unmap()]
	if sb == nil {
		return nil, nil
	}
	return sb, sb.policy
}

// policyOf returns sb's current policy, nil once it is removed.
func (p *Proxy) policyOf(sb *sandbox) *policy.Policy {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID[sb.id] != sb {
		return nil
	}
	return sb.policy
}

// track registers s under sb; false when sb is gone or at its connection limit.
func (p *Proxy) track(sb *sandbox, s *session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID[sb.id] != sb || len(sb.conns) >= p.cfg.MaxConnsPerSandbox {
		return false
	}
	sb.conns[s] = struct{}{}
	return true
}

func (p *Proxy) untrack(sb *sandbox, s *session) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(sb.conns, s)
}

func (sb *sandbox) sessionsLocked() []*session {
	out := make([]*session, 0, len(sb.conns))
	for s := range sb.conns {
		out = append(out, s)
	}
	return out
}

func closeAll(list []*session) {
	for _, s := range list {
		s.abort()
	}
}

// emit reports an event.
func (p *Proxy) emit(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if p.cfg.Events != nil {
		p.cfg.Events(e)
	}
}

// inBoundary reports whether dst may never be dialed.
func (p *Proxy) inBoundary(dst netip.Addr) bool {
	dst = dst.Unmap()
	if !dst.Is4() || dst.IsLoopback() || dst.IsLinkLocalUnicast() || dst.IsMulticast() || dst.IsUnspecified() ||
		dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	for _, b := range p.cfg.Boundary {
		if b.Contains(dst) {
			return true
		}
	}
	return false
}
