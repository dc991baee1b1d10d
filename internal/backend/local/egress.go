package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/egress/proxy"
	"github.com/cubby-dev/cubby/internal/network"
	"golang.org/x/sys/unix"
)

// EgressProxy is the egress proxy the backend keeps informed (package egress).
type EgressProxy interface {
	// Set gives sandbox id at addr policy p (nil = none) and cuts what p denies.
	Set(ctx context.Context, id string, addr netip.Addr, p *policy.Policy) error
	// Remove forgets sandbox id and closes its proxied connections.
	Remove(ctx context.Context, id string)
	// CAPEM is the certificate sandboxes with HTTPS header rules must trust.
	CAPEM() []byte
}

// SetEgress implements backend.Backend.
func (b *Backend) SetEgress(ctx context.Context, id string, p *policy.Policy) error {
	s, err := b.get(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !b.current(s) {
		return fmt.Errorf("sandbox %s: %w", id, backend.ErrNotFound)
	}
	hadCA := needsCA(s.egress)
	prev, prevNoInet := s.egress, s.NoInternet
	s.egress, s.NoInternet = p, p.BlocksAll()
	if err := b.applyEgress(ctx, s); err != nil {
		s.egress, s.NoInternet = prev, prevNoInet
		return errors.Join(fmt.Errorf("egress policy of %s: %w", id, err), b.applyEgress(ctx, s))
	}
	if needsCA(p) != hadCA && !s.Paused {
		if err := b.agentClient(s, s.agentToken()).Init(ctx, b.initFor(s)); err != nil {
			return fmt.Errorf("egress CA of %s: %w", id, err)
		}
		s.Rekey = ""
	}
	return b.saveState(s)
}

// applyEgress programs s's policy into nftables and the egress proxy, and
// s.NoInternet into the no-internet set. Called
// with s.mu held; a sandbox without a network (stopped on disk) is skipped
// and gets it when its network is rebuilt.
func (b *Backend) applyEgress(ctx context.Context, s *sandbox) error {
	if _, ok := b.net.Get(s.ID); !ok {
		return nil
	}
	p := s.egress
	if p.IsZero() && !s.egressSet {
		return b.net.SetInternetAccess(ctx, s.ID, !s.NoInternet) // nothing to undo: skip the transactions
	}
	s.egressSet = !p.IsZero()
	s.egressNow.Store(p)
	rules := network.EgressRules{}
	if p != nil {
		for _, n := range p.Allow {
			rules.Allow = append(rules.Allow, n.Prefix)
		}
		for _, n := range p.Deny {
			rules.Deny = append(rules.Deny, n.Prefix)
		}
		rules.Steer, rules.SteerAllTCP = p.NeedsProxy(), p.NeedsProxyForAllTCP()
	}
	if b.egress == nil && (rules.Steer || rules.SteerAllTCP) {
		return fmt.Errorf("%w: this server runs no egress proxy (domain rules, header rules, egressProxy)", backend.ErrNotSupported)
	}
	if b.egress != nil {
		if err := b.egress.Set(ctx, s.ID, s.Addr, p); err != nil {
			return err
		}
	}
	if err := b.net.SetEgress(ctx, s.ID, rules); err != nil {
		return err
	}
	return b.net.SetInternetAccess(ctx, s.ID, !s.NoInternet)
}

// needsCA reports whether p terminates HTTPS (rules rewrite requests).
func needsCA(p *policy.Policy) bool { return p != nil && len(p.Rules) > 0 }

// initFor is s.Init with s's hostname and the egress CA when s's policy
// needs it.
func (b *Backend) initFor(s *sandbox) agentapi.InitRequest {
	init := s.Init
	init.Hostname, init.EgressCA = s.ID, ""
	if needsCA(s.egress) && b.egress != nil {
		init.EgressCA = string(b.egress.CAPEM())
	}
	return init
}

// forgetEgress tells the proxy sandbox id is gone.
func (b *Backend) forgetEgress(ctx context.Context, id string) {
	if b.egress != nil {
		b.egress.Remove(ctx, id)
	}
}

// EgressEvent writes one egress decision into its sandbox's log as a host
// record (package sandboxlog: "egress allowed" at INFO, "egress denied" at
// WARN, with kind, host, dst, rule and reason); events of unknown sandboxes,
// and of sandboxes whose output is not being drained (stopped), are dropped.
func (b *Backend) EgressEvent(e proxy.Event) {
	if e.Sandbox == "" {
		return
	}
	s, err := b.get(e.Sandbox)
	if err != nil {
		return
	}
	out := s.outNow.Load()
	if out == nil {
		return
	}
	level, msg := slog.LevelInfo, "egress allowed"
	if !e.Allow {
		level, msg = slog.LevelWarn, "egress denied"
	}
	args := []any{"component", "egress", "kind", e.Kind}
	for _, kv := range [][2]string{{"host", e.Host}, {"dst", e.Dst}, {"rule", e.Rule}, {"reason", e.Reason}} {
		if kv[1] != "" {
			args = append(args, kv[0], kv[1])
		}
	}
	out.Note(level, msg, args...)
}

// WatchKernelDecisions reports the egress decisions nftables takes on
// addresses (allowOut and denyOut entries, for traffic that does not go
// through the egress proxy) to sink, as events of kind proxy.KindIP naming the
// entry that decided, until ctx is done. Errors: the kernel's decision log
// cannot be read (another process holds its group).
func (b *Backend) WatchKernelDecisions(ctx context.Context, sink func(proxy.Event)) error {
	return b.net.WatchDecisions(ctx, func(d network.Decision) {
		e := proxy.Event{Sandbox: d.ID, Time: time.Now().UTC(), Allow: d.Allowed, Kind: proxy.KindIP, Dst: d.Dst.String(),
			Reason: protoName(d.Proto)}
		if s, err := b.get(d.ID); err == nil {
			e.Rule = s.egressNow.Load().Decide("", d.Dst.Addr()).Rule
		}
		sink(e)
	})
}

func protoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_ICMP:
		return "icmp"
	}
	return fmt.Sprintf("ip protocol %d", p)
}
