// Package egress runs the egress proxy (package egress/proxy) in a process of
// its own, `cubby egress-proxy`, and keeps it in step with the server:
//
//   - The server (Supervisor) owns the host side: the proxy's network (a netns
//     wired like a sandbox's, network.AttachEgress, from which every allowed
//     connection is dialed), its listening sockets on the gateway address (the
//     ports nftables steers sandboxes' traffic to) and the per-server CA.
//   - The child gets those sockets as inherited descriptors, and two Unix
//     socket pairs: on one the server calls it (Proxy.Set, Proxy.Remove,
//     Proxy.Serve), on the other it calls the server (Host.Secret for secret
//     values at request time, Host.Events for its decisions). Nothing of it is
//     reachable from a sandbox but the steered ports.
//   - When the child dies its sockets close with it: steered connections are
//     refused (fail closed; the nftables rules never depend on it). The
//     Supervisor starts it again (backoff 100 ms to 5 s), binds the same ports,
//     hands it every sandbox's policy and only then lets it accept.
//
// A crash of the proxy (which parses what sandboxes send: TLS, HTTP, DNS) thus
// never takes down the control plane, and the control plane's keys and
// database never live in the process that parses sandbox traffic.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/egress/ca"
	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/egress/proxy"
	"github.com/cubby-dev/cubby/internal/network"
)

// ChildCommand is the cubby subcommand that runs the proxy process.
const ChildCommand = "egress-proxy"

// Files of the per-server CA in the data dir.
const (
	CACertFile = "egress-ca.pem"
	CAKeyFile  = "egress-ca.key"
)

// Restart backoff of the child.
const (
	minBackoff  = 100 * time.Millisecond
	maxBackoff  = 5 * time.Second
	healthyRun  = 30 * time.Second // a run this long resets the backoff
	callTimeout = 10 * time.Second // bound on one call to the child
)

// Network is what the Supervisor needs of the host network (network.Manager).
type Network interface {
	AttachEgress(ctx context.Context) (network.Attachment, error)
	Detach(ctx context.Context, id string) error
	SetEgressPorts(ctx context.Context, p network.EgressPorts) error
	Gateway() netip.Addr
}

// SecretSource gives secret values for sandboxes (the control plane).
type SecretSource interface {
	// SandboxSecret returns the value of secret name of sandbox's team; errors
	// wrap policy.ErrUnknownSecret when there is none.
	SandboxSecret(ctx context.Context, sandbox, name string) (string, error)
}

// Config configures a Supervisor.
type Config struct {
	Exe        string           // the cubby binary; default os.Executable()
	DataDir    string           // where the CA files are (created on first start)
	ServerName string           // in the CA's subject
	Subnet     netip.Prefix     // the sandboxes' subnet: never dialed by the proxy
	Resolvers  []netip.AddrPort // upstream DNS resolvers
	UpstreamCA string           // PEM file of extra roots for terminated TLS upstreams; "" = system roots only
	Net        Network
	Secrets    SecretSource
	Events     func(proxy.Event) // the child's decisions; nil = dropped
	OnRestart  func()            // called at each restart of the child (counter)
	Log        *slog.Logger
}

// Supervisor runs and feeds the egress proxy process. Safe for concurrent use.
type Supervisor struct {
	cfg   Config
	log   *slog.Logger
	ca    *ca.Authority
	ports network.EgressPorts
	netns string

	mu     sync.Mutex
	state  map[string]SetArgs // policy of every sandbox, pushed to each child
	client *rpc.Client        // nil while no child serves
	cmd    *exec.Cmd
	closed bool
	done   chan struct{}

	spawnOnce sync.Once
	spawnReq  chan spawnReq // to the goroutine that starts children
}

// New loads (or creates) the CA in cfg.DataDir. Start starts the child.
func New(cfg Config) (*Supervisor, error) {
	if cfg.Net == nil || cfg.Secrets == nil {
		return nil, errors.New("egress: a network and a secret source are required")
	}
	if cfg.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("egress: locate cubby binary: %w", err)
		}
		cfg.Exe = exe
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	auth, err := ca.LoadOrCreate(filepath.Join(cfg.DataDir, CACertFile), filepath.Join(cfg.DataDir, CAKeyFile),
		"Cubby egress CA "+cfg.ServerName)
	if err != nil {
		return nil, err
	}
	return &Supervisor{cfg: cfg, log: cfg.Log.With("component", "egress"), ca: auth,
		state: map[string]SetArgs{}, done: make(chan struct{})}, nil
}

// CAPEM returns the CA certificate sandboxes with header rules trust.
func (s *Supervisor) CAPEM() []byte { return s.ca.CertPEM() }

// Start attaches the proxy's network, binds its ports on the gateway, tells
// nftables about them and starts the child; it returns once the first child
// serves (or failed to start: it is retried in the background).
func (s *Supervisor) Start(ctx context.Context) error {
	att, err := s.cfg.Net.AttachEgress(ctx)
	if err != nil {
		return fmt.Errorf("egress network: %w", err)
	}
	s.mu.Lock()
	s.netns = att.NetnsPath
	s.mu.Unlock()
	socks, err := s.bind(network.EgressPorts{})
	if err != nil {
		return err
	}
	s.ports = socks.ports()
	if err := s.cfg.Net.SetEgressPorts(ctx, s.ports); err != nil {
		socks.close()
		return err
	}
	first := make(chan error, 1)
	go s.run(socks, first)
	select {
	case err := <-first:
		if err != nil {
			s.log.Error("egress proxy did not start; retrying", "err", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Set records sandbox id's policy (nil = none) and, when the child runs,
// applies it there before returning: its connections the policy denies are
// cut. While no child runs, steered traffic is refused and the policy is
// applied when the next one starts.
func (s *Supervisor) Set(ctx context.Context, id string, addr netip.Addr, p *policy.Policy) error {
	args := SetArgs{ID: id, Addr: addr, Policy: p}
	s.mu.Lock()
	s.state[id] = args
	c := s.client
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	err := call(ctx, c, "Proxy.Set", args)
	if errors.Is(err, rpc.ErrShutdown) || errors.Is(err, io.ErrUnexpectedEOF) {
		s.log.Warn("egress proxy went away; the policy applies when it is back", "sandbox", id)
		return nil
	}
	return err
}

// Remove forgets sandbox id and closes its proxied connections.
func (s *Supervisor) Remove(ctx context.Context, id string) {
	s.mu.Lock()
	_, known := s.state[id]
	delete(s.state, id)
	c := s.client
	s.mu.Unlock()
	if c != nil && known {
		if err := call(ctx, c, "Proxy.Remove", id); err != nil {
			s.log.Warn("remove sandbox from egress proxy", "sandbox", id, "err", err)
		}
	}
}

// Close stops the child (and its restarts) and removes the proxy's network;
// steered traffic is refused until the next server starts it again.
func (s *Supervisor) Close() error {
	s.mu.Lock()
	s.closed = true
	cmd, started := s.cmd, s.netns != ""
	s.mu.Unlock()
	if !started {
		return nil
	}
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
	select {
	case <-s.done:
		if s.spawnReq != nil {
			close(s.spawnReq) // no child is started any more
		}
	case <-time.After(callTimeout):
		s.log.Warn("egress proxy supervisor did not stop")
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return s.cfg.Net.Detach(ctx, network.EgressID)
}

// call invokes method on the child, bounded by ctx and callTimeout.
func call(ctx context.Context, c *rpc.Client, method string, args any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	done := c.Go(method, args, &struct{}{}, make(chan *rpc.Call, 1)).Done
	select {
	case res := <-done:
		if res.Error != nil {
			return fmt.Errorf("egress proxy %s: %w", method, res.Error)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("egress proxy %s: %w", method, ctx.Err())
	}
}

// listeners are the sockets the child serves on.
type listeners struct {
	proxy  *net.TCPListener
	dnsUDP *net.UDPConn
	dnsTCP *net.TCPListener
}

func (l listeners) ports() network.EgressPorts {
	return network.EgressPorts{Proxy: uint16(l.proxy.Addr().(*net.TCPAddr).Port), DNS: uint16(l.dnsUDP.LocalAddr().(*net.UDPAddr).Port)}
}

func (l listeners) close() {
	for _, c := range []interface{ Close() error }{l.proxy, l.dnsUDP, l.dnsTCP} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// bind opens the proxy's sockets on the gateway at ports (zero: any free).
func (s *Supervisor) bind(ports network.EgressPorts) (listeners, error) {
	gw := s.cfg.Net.Gateway()
	var l listeners
	var err error
	l.proxy, err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(gw, ports.Proxy)))
	if err == nil {
		l.dnsUDP, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(gw, ports.DNS)))
	}
	if err == nil {
		dns := uint16(l.dnsUDP.LocalAddr().(*net.UDPAddr).Port)
		l.dnsTCP, err = net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(netip.AddrPortFrom(gw, dns)))
	}
	if err != nil {
		l.close()
		return listeners{}, fmt.Errorf("egress proxy sockets on %s: %w", gw, err)
	}
	return l, nil
}
