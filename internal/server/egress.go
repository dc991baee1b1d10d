package server

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/cubby-dev/cubby/internal/backend/local"
	"github.com/cubby-dev/cubby/internal/controlplane"
	"github.com/cubby-dev/cubby/internal/egress"
	"github.com/cubby-dev/cubby/internal/egress/proxy"
	"github.com/cubby-dev/cubby/internal/secretbox"
	"github.com/cubby-dev/cubby/internal/telemetry"
)

// secretKeyFile is the server key secrets are sealed with, in the data dir.
const secretKeyFile = "secret.key"

// dnsPort is the port of resolvers given without one.
const dnsPort = 53

// resolvConf lists the host's resolvers (resolv.conf(5)).
const resolvConf = "/etc/resolv.conf"

// ParseResolvers parses ADDR or ADDR:PORT resolver addresses (IPv4; port 53
// by default). An empty list gives the IPv4 nameservers of /etc/resolv.conf.
func ParseResolvers(list []string) ([]netip.AddrPort, error) {
	if len(list) == 0 {
		return hostResolvers()
	}
	var out []netip.AddrPort
	for _, s := range list {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("resolver %q: want an IPv4 address with an optional :port", s)
			}
			ap = netip.AddrPortFrom(a, dnsPort)
		}
		if !ap.Addr().Is4() {
			return nil, fmt.Errorf("resolver %q: only IPv4 is supported", s)
		}
		out = append(out, ap)
	}
	return out, nil
}

func hostResolvers() ([]netip.AddrPort, error) {
	f, err := os.Open(resolvConf)
	if err != nil {
		return nil, fmt.Errorf("egress resolvers: %w", err)
	}
	defer f.Close()
	var out []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil && a.Is4() {
				out = append(out, netip.AddrPortFrom(a, dnsPort))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("egress resolvers: no IPv4 nameserver in %s (use --egress-resolver)", resolvConf)
	}
	return out, nil
}

// secretSource hands the egress proxy secret values through the control
// plane, which is built after the supervisor (set before it starts).
type secretSource struct{ cp *controlplane.Service }

// SandboxSecret implements egress.SecretSource.
func (s *secretSource) SandboxSecret(ctx context.Context, sandbox, name string) (string, error) {
	return s.cp.SandboxSecret(ctx, sandbox, name)
}

// newSupervisor builds the egress proxy's supervisor; events go to sink.
func newSupervisor(cfg Config, nm egress.Network, secrets egress.SecretSource, sink func(proxy.Event), onRestart func(), log *slog.Logger) (*egress.Supervisor, error) {
	resolvers := cfg.EgressResolvers
	if len(resolvers) == 0 {
		var err error
		if resolvers, err = hostResolvers(); err != nil {
			return nil, err
		}
	}
	return egress.New(egress.Config{
		DataDir: cfg.DataDir, ServerName: cfg.Bridge, Subnet: cfg.Subnet, Resolvers: resolvers,
		UpstreamCA: cfg.EgressUpstreamCA, Net: nm, Secrets: secrets, Events: sink, OnRestart: onRestart, Log: log,
	})
}

// openSealer loads (or creates) the key secrets are sealed with.
func openSealer(dataDir string) (*secretbox.Box, error) {
	return secretbox.LoadOrCreate(filepath.Join(dataDir, secretKeyFile))
}

// egressSink counts an egress decision and appends it to its sandbox's log.
func egressSink(tel *telemetry.Metrics, b *local.Backend) func(proxy.Event) {
	return func(e proxy.Event) {
		tel.EgressDecision(e.Kind, e.Allow)
		b.EgressEvent(e)
	}
}

// startEgress starts the egress proxy and the reader of nftables' egress
// decisions. It runs before the control plane recovers sandboxes, whose
// policies need the proxy's ports.
func startEgress(ctx context.Context, sup *egress.Supervisor, b *local.Backend, tel *telemetry.Metrics, log *slog.Logger) error {
	if err := sup.Start(ctx); err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	if err := b.WatchKernelDecisions(ctx, egressSink(tel, b)); err != nil {
		log.Warn("egress decisions taken by nftables are not logged", "err", err)
	}
	return nil
}
