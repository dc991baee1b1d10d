package sdk

import (
	"context"
	"maps"
	"net/http"

	"github.com/cubby-dev/cubby/sdk/internal/apiclient"
)

// AllTraffic is the CIDR of all IPv4 destinations ("deny everything but").
const AllTraffic = "0.0.0.0/0"

// NetworkUpdate is a sandbox's egress settings (E2B's network allowOut,
// denyOut, rules, egressProxy). An allowed entry beats a denied one; domain
// entries need DenyOut to hold AllTraffic and are checked against the HTTP
// Host or TLS server name of each connection.
type NetworkUpdate struct {
	// AllowOut lists IPv4 addresses, CIDRs, domains and "*.domain" wildcards
	// the sandbox may reach.
	AllowOut []string
	// DenyOut lists IPv4 addresses and CIDRs it may not reach (AllTraffic:
	// everything AllowOut does not name).
	DenyOut []string
	// Rules maps domains (or "*.domain") to header rules applied to requests
	// leaving for them; values may hold SecretPlaceholder(name).
	Rules map[string][]NetworkRule
	// EgressProxy tunnels the sandbox's TCP through a SOCKS5 proxy.
	EgressProxy *EgressProxy
	// AllowInternetAccess, when false, denies AllTraffic (AllowOut still applies).
	AllowInternetAccess *bool
}

// NetworkRule adds or replaces request headers.
type NetworkRule struct {
	Headers map[string]string
}

// EgressProxy is a SOCKS5 proxy (host:port, optional RFC 1929 credentials).
type EgressProxy struct {
	Address, Username, Password string
}

func (u NetworkUpdate) wireRules() *map[string][]apiclient.SandboxNetworkRule {
	if u.Rules == nil {
		return nil
	}
	out := map[string][]apiclient.SandboxNetworkRule{}
	for host, rules := range u.Rules {
		list := make([]apiclient.SandboxNetworkRule, 0, len(rules))
		for _, r := range rules {
			h := maps.Clone(r.Headers)
			list = append(list, apiclient.SandboxNetworkRule{Transform: &apiclient.SandboxNetworkTransform{Headers: &h}})
		}
		out[host] = list
	}
	return &out
}

func (u NetworkUpdate) wireProxy() *apiclient.SandboxEgressProxy {
	if u.EgressProxy == nil {
		return nil
	}
	p := &apiclient.SandboxEgressProxy{Address: u.EgressProxy.Address}
	if u.EgressProxy.Username != "" {
		p.Username = new(u.EgressProxy.Username)
	}
	if u.EgressProxy.Password != "" {
		p.Password = new(u.EgressProxy.Password)
	}
	return p
}

func optSlice[T any](s []T) *[]T {
	if s == nil {
		return nil
	}
	return &s
}

func (n *NetworkOptions) wire() *apiclient.SandboxNetworkConfig {
	nc := &apiclient.SandboxNetworkConfig{AllowPublicTraffic: n.AllowPublicTraffic, AllowOut: optSlice(n.AllowOut),
		DenyOut: optSlice(n.DenyOut), Rules: n.wireRules(), EgressProxy: n.wireProxy()}
	if n.MaskRequestHost != "" {
		nc.MaskRequestHost = new(n.MaskRequestHost)
	}
	for _, p := range n.HTTPSPorts {
		if nc.HttpsPorts == nil {
			nc.HttpsPorts = new([]int32{})
		}
		*nc.HttpsPorts = append(*nc.HttpsPorts, int32(p))
	}
	return nc
}

// UpdateNetwork replaces the sandbox's egress settings at once (PUT
// /sandboxes/{id}/network): fields left zero are cleared, connections the new
// settings deny are cut. Errors: *InvalidArgumentError (a bad entry, a
// missing secret), *NotFoundError, control-plane errors.
func (s *Sandbox) UpdateNetwork(ctx context.Context, u NetworkUpdate) error {
	if s.cp == nil {
		return s.cpErr
	}
	body := apiclient.SandboxNetworkUpdateConfig{AllowOut: optSlice(u.AllowOut), DenyOut: optSlice(u.DenyOut),
		Rules: u.wireRules(), EgressProxy: u.wireProxy(), AllowInternetAccess: u.AllowInternetAccess}
	_, _, _, err := s.cp.call(ctx, "update sandbox network", s.id, []int{http.StatusNoContent, http.StatusOK},
		func(ctx context.Context) (*http.Response, error) {
			return s.cp.client.UpdateSandboxNetwork(ctx, s.id, body)
		})
	return err
}

// networkFromWire converts the network settings GetInfo returns.
func networkFromWire(w *apiclient.SandboxNetworkConfig) *NetworkOptions {
	n := &NetworkOptions{AllowPublicTraffic: w.AllowPublicTraffic, MaskRequestHost: deref(w.MaskRequestHost)}
	n.AllowOut, n.DenyOut = deref(w.AllowOut), deref(w.DenyOut)
	for _, p := range deref(w.HttpsPorts) {
		n.HTTPSPorts = append(n.HTTPSPorts, int(p))
	}
	if w.Rules != nil {
		n.Rules = map[string][]NetworkRule{}
		for host, rules := range *w.Rules {
			for _, r := range rules {
				var h map[string]string
				if r.Transform != nil {
					h = deref(r.Transform.Headers)
				}
				n.Rules[host] = append(n.Rules[host], NetworkRule{Headers: h})
			}
		}
	}
	if p := w.EgressProxy; p != nil {
		n.EgressProxy = &EgressProxy{Address: p.Address, Username: deref(p.Username)}
	}
	return n
}
