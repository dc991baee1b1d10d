package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/rpc"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/egress/ca"
	"github.com/cubby-dev/cubby/internal/egress/proxy"
)

// Descriptors the child inherits (after stdin, stdout, stderr).
const (
	fdProxy = 3 + iota
	fdDNSUDP
	fdDNSTCP
	fdControl
	fdHost
)

// ChildOptions are the flags of `cubby egress-proxy`.
type ChildOptions struct {
	Netns      string           // the proxy's network namespace (dials leave from it)
	Subnet     netip.Prefix     // never dialed
	Resolvers  []netip.AddrPort // upstream DNS
	CACert     string
	CAKey      string
	UpstreamCA string // extra roots for terminated TLS upstreams
	Log        *slog.Logger
}

// RunChild is the egress proxy process: it serves on the inherited sockets
// once the server says so and exits when the server's control connection
// closes. Errors: a missing descriptor, netns or CA.
func RunChild(ctx context.Context, o ChildOptions) error {
	ln, pc, tln, err := inheritedSockets()
	if err != nil {
		return err
	}
	ctl, err := net.FileConn(os.NewFile(fdControl, "control"))
	if err != nil {
		return fmt.Errorf("control connection: %w", err)
	}
	hostConn, err := net.FileConn(os.NewFile(fdHost, "host"))
	if err != nil {
		return fmt.Errorf("host connection: %w", err)
	}
	host := rpc.NewClient(hostConn)
	p, err := newChildProxy(o, host)
	if err != nil {
		return err
	}
	srv := rpc.NewServer()
	svc := &Proxy{p: p, serve: func() {
		go func() { _ = p.Serve(ln) }()
		go func() { _ = p.ServeDNS(pc) }()
		go func() { _ = p.ServeDNSTCP(tln) }()
	}}
	if err := srv.RegisterName("Proxy", svc); err != nil {
		return err
	}
	o.Log.Info("egress proxy started", "pid", os.Getpid())
	srv.ServeConn(ctl) // until the server closes it (or dies)
	return errors.New("egress proxy: the server closed the control connection")
}

func inheritedSockets() (net.Listener, net.PacketConn, net.Listener, error) {
	ln, err := net.FileListener(os.NewFile(fdProxy, "proxy"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("proxy listener: %w", err)
	}
	pc, err := net.FilePacketConn(os.NewFile(fdDNSUDP, "dns-udp"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("DNS socket: %w", err)
	}
	tln, err := net.FileListener(os.NewFile(fdDNSTCP, "dns-tcp"))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("DNS listener: %w", err)
	}
	return ln, pc, tln, nil
}

func newChildProxy(o ChildOptions, host *rpc.Client) (*proxy.Proxy, error) {
	d, err := newNetnsDialer(o.Netns)
	if err != nil {
		return nil, err
	}
	auth, err := ca.Load(o.CACert, o.CAKey)
	if err != nil {
		return nil, err
	}
	roots, err := upstreamRoots(o.UpstreamCA)
	if err != nil {
		return nil, err
	}
	ev := newEventBatcher(host, o.Log)
	return proxy.New(proxy.Config{
		Dialer: d, Resolver: proxy.NewResolver(o.Resolvers), Boundary: []netip.Prefix{o.Subnet},
		CA: auth, UpstreamRoots: roots, Secrets: rpcSecrets{host}, Events: ev.add, Log: o.Log,
		DNSUpstreams: o.Resolvers,
	})
}

// upstreamRoots returns the system roots plus the certificates in file.
func upstreamRoots(file string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if file == "" {
		return pool, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("upstream CA: %w", err)
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("upstream CA %s: no certificate in it", file)
	}
	return pool, nil
}

// Proxy is the service the server calls in the child.
type Proxy struct {
	p     *proxy.Proxy
	once  sync.Once
	serve func()
}

// Set applies a sandbox's policy.
func (s *Proxy) Set(args SetArgs, _ *struct{}) error {
	s.p.Set(args.ID, args.Addr, args.Policy)
	return nil
}

// Remove forgets a sandbox.
func (s *Proxy) Remove(id string, _ *struct{}) error {
	s.p.Remove(id)
	return nil
}

// Serve starts accepting (once the server handed over every policy).
func (s *Proxy) Serve(_ int, _ *struct{}) error {
	s.once.Do(s.serve)
	return nil
}

// rpcSecrets asks the server for secret values.
type rpcSecrets struct{ c *rpc.Client }

// SecretValue implements proxy.Secrets through the server's Host.Secret.
func (r rpcSecrets) SecretValue(ctx context.Context, sandbox, name string) (string, error) {
	var v string
	call := r.c.Go("Host.Secret", SecretArgs{Sandbox: sandbox, Name: name}, &v, make(chan *rpc.Call, 1))
	select {
	case res := <-call.Done:
		return v, errUnknownSecret(res.Error)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// eventBatcher sends events to the server in batches (at most every 100 ms);
// when the server lags, events beyond the buffer are counted and dropped.
type eventBatcher struct {
	host *rpc.Client
	log  *slog.Logger
	ch   chan proxy.Event
	mu   sync.Mutex
	lost int
}

func newEventBatcher(host *rpc.Client, log *slog.Logger) *eventBatcher {
	b := &eventBatcher{host: host, log: log, ch: make(chan proxy.Event, 4096)}
	go b.loop()
	return b
}

func (b *eventBatcher) add(e proxy.Event) {
	select {
	case b.ch <- e:
	default:
		b.mu.Lock()
		b.lost++
		b.mu.Unlock()
	}
}

func (b *eventBatcher) loop() {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var batch []proxy.Event
	for {
		select {
		case e := <-b.ch:
			batch = append(batch, e)
			if len(batch) < 256 {
				continue
			}
		case <-tick.C:
		}
		b.mu.Lock()
		if b.lost > 0 {
			batch = append(batch, proxy.Event{Time: time.Now().UTC(), Reason: fmt.Sprintf("%d decisions not logged (the server lagged)", b.lost)})
			b.lost = 0
		}
		b.mu.Unlock()
		if len(batch) > 0 {
			if err := b.host.Call("Host.Events", batch, &struct{}{}); err != nil {
				b.log.Warn("send decisions to the server", "err", err)
			}
			batch = nil
		}
	}
}

// netnsDialer opens TCP connections from a network namespace: each dial runs
// on an OS thread switched into it (the socket keeps the namespace it was
// created in) and back.
type netnsDialer struct {
	ns, host int // open namespace files
	d        net.Dialer
}

func newNetnsDialer(path string) (*netnsDialer, error) {
	ns, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("egress netns %s: %w", path, err)
	}
	host, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(ns)
		return nil, fmt.Errorf("own netns: %w", err)
	}
	return &netnsDialer{ns: ns, host: host}, nil
}

// DialContext implements proxy.Dialer: the socket is made in the egress netns.
func (n *netnsDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(n.ns, unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("enter egress netns: %w", err)}
			return // the thread dies with the goroutine (still locked)
		}
		c, err := n.d.DialContext(ctx, network, address)
		if serr := unix.Setns(n.host, unix.CLONE_NEWNET); serr != nil {
			ch <- result{c, err}
			return // never reuse a thread left in the other namespace
		}
		runtime.UnlockOSThread()
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
