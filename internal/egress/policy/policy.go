// Package policy turns a sandbox's network settings (E2B's SandboxNetworkConfig:
// allowOut, denyOut, rules, egressProxy, allow_internet_access; the contract is
// written down in docs/egress.md) into an egress Policy, and decides single
// connections against it.
//
// Semantics, as E2B defines them:
//   - allowOut holds IPv4 addresses, CIDRs, domain names and "*.domain"
//     wildcards; denyOut holds addresses and CIDRs only; "0.0.0.0/0" is all
//     traffic, and allow_internet_access=false is the same as denying it.
//   - An allowed entry always beats a denied one; what no entry names is
//     allowed.
//   - Domain entries need denyOut to deny all traffic (otherwise they would
//     change nothing); they are checked against the name a connection itself
//     asks for (the HTTP Host header, the TLS server name), never against DNS
//     answers.
//   - A wildcard "*.example.com" matches names below example.com at any depth,
//     never example.com itself; a bare "*" is invalid.
//   - rules map domain patterns to header transforms applied to requests to
//     matching hosts; an exact key beats wildcards, the longest wildcard beats
//     shorter ones, and rule lists are not merged. Rules grant no access.
//   - Header values may hold ${e2b.secrets.NAME} placeholders, filled in with
//     the secret's value when a request leaves the host.
//
// A Policy is plain data (JSON) so that it can be persisted and handed to the
// egress proxy process.
package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// AllTraffic is the CIDR E2B's SDKs call ALL_TRAFFIC.
const AllTraffic = "0.0.0.0/0"

// Limits on the size of a network config, so a policy stays cheap to check
// and to program into nftables.
const (
	MaxEntries      = 1000 // allowOut and denyOut entries each
	MaxRuleHosts    = 200  // keys of rules
	MaxRulesPerHost = 20   // rules of one key
	MaxHeaders      = 50   // headers of one rule
	MaxHeaderValue  = 8192 // bytes of one header value template
)

// Spec is a network config as a client sent it (wire names in comments).
type Spec struct {
	AllowOut      []string               // allowOut
	DenyOut       []string               // denyOut
	Rules         map[string][]Transform // rules: domain pattern -> transforms, in order
	EgressProxy   *Upstream              // egressProxy
	AllowInternet *bool                  // allow_internet_access; nil = true
}

// Transform is one rule's transform: headers to add or replace on a request.
type Transform struct {
	Headers map[string]string // header name -> value template
}

// Upstream is a SOCKS5 proxy (RFC 1928, RFC 1929 credentials) that allowed
// TCP connections are tunnelled through instead of going out directly.
type Upstream struct {
	Address  string `json:"address"`            // host:port
	Username string `json:"username,omitempty"` // <= 255 bytes
	Password string `json:"password,omitempty"` // <= 255 bytes; only with Username
}

// Policy is a validated egress policy. The zero value allows everything.
type Policy struct {
	Allow   []Net      `json:"allow,omitempty"`   // allowOut addresses and CIDRs
	Domains []Domain   `json:"domains,omitempty"` // allowOut domains
	Deny    []Net      `json:"deny,omitempty"`    // denyOut (and allow_internet_access=false)
	Rules   []HostRule `json:"rules,omitempty"`   // header rules, most specific first
	Proxy   *Upstream  `json:"proxy,omitempty"`   // egressProxy
}

// Net is one address or CIDR entry and the config field it came from.
type Net struct {
	Prefix netip.Prefix `json:"prefix"`
	Field  string       `json:"field"` // e.g. "allowOut[2]"
}

// Domain is one domain entry of allowOut.
type Domain struct {
	Pattern Pattern `json:"pattern"`
	Field   string  `json:"field"`
}

// HostRule is the rule list of one rules key.
type HostRule struct {
	Pattern Pattern  `json:"pattern"`
	Headers []Header `json:"headers"` // in the order they are applied
}

// Header is one header a rule sets; Value is a Template.
type Header struct {
	Name  string   `json:"name"`  // canonical MIME header name
	Value Template `json:"value"` // validated by Parse
}

// IsZero reports whether p restricts nothing and changes nothing.
func (p *Policy) IsZero() bool {
	return p == nil || len(p.Allow)+len(p.Domains)+len(p.Deny)+len(p.Rules) == 0 && p.Proxy == nil
}

// DeniesAll reports whether denyOut covers every address (0.0.0.0/0), so that
// only allowed entries get through.
func (p *Policy) DeniesAll() bool {
	return p != nil && slices.ContainsFunc(p.Deny, func(n Net) bool { return n.Prefix.Bits() == 0 })
}

// BlocksAll reports whether p lets nothing out at all: everything denied,
// nothing allowed, no proxy.
func (p *Policy) BlocksAll() bool {
	return p.DeniesAll() && len(p.Allow)+len(p.Domains) == 0 && p.Proxy == nil
}

// NeedsProxy reports whether the sandbox's HTTP, TLS and DNS traffic must go
// through the egress proxy: domain entries and rules are decided on names only
// it sees, and an upstream SOCKS5 proxy is reached through it.
func (p *Policy) NeedsProxy() bool {
	return p != nil && (len(p.Domains) > 0 || len(p.Rules) > 0 || p.Proxy != nil)
}

// NeedsProxyForAllTCP reports whether every TCP connection must go through
// the egress proxy (egressProxy tunnels all outbound TCP).
func (p *Policy) NeedsProxyForAllTCP() bool { return p != nil && p.Proxy != nil }

// Decision is the verdict on one connection.
type Decision struct {
	Allow bool
	// Rule names the entry that decided ("allowOut[1] *.example.com",
	// "denyOut[0] 0.0.0.0/0"); "" when none did (allowed by default).
	Rule string
	// ByName is true when a domain entry allowed the connection: it must go
	// to the name (resolved by the host), not to the address the sandbox
	// connected to.
	ByName bool
}

// Decide decides a connection to dst asking for name ("" when it names
// none, e.g. TLS without SNI or plain TCP): an allowed address, then an
// allowed domain, then a denied address, else allowed.
func (p *Policy) Decide(name string, dst netip.Addr) Decision {
	if p == nil {
		return Decision{Allow: true}
	}
	for _, n := range p.Allow {
		if n.Prefix.Contains(dst) {
			return Decision{Allow: true, Rule: n.Field + " " + n.Prefix.String()}
		}
	}
	if d, ok := p.matchDomain(name); ok {
		return Decision{Allow: true, Rule: d.Field + " " + d.Pattern.String(), ByName: true}
	}
	for _, n := range p.Deny {
		if n.Prefix.Contains(dst) {
			return Decision{Allow: false, Rule: n.Field + " " + n.Prefix.String()}
		}
	}
	return Decision{Allow: true}
}

// Resolvable reports whether the host's resolver answers a sandbox's query for
// name: always, unless everything is denied; then only for names an allowed
// domain entry matches (so DNS queries cannot carry data to other names).
// rule names the matching entry.
func (p *Policy) Resolvable(name string) (ok bool, rule string) {
	if !p.DeniesAll() {
		return true, ""
	}
	if d, ok := p.matchDomain(name); ok {
		return true, d.Field + " " + d.Pattern.String()
	}
	return false, ""
}

func (p *Policy) matchDomain(name string) (Domain, bool) {
	name = CanonicalName(name)
	if name == "" {
		return Domain{}, false
	}
	for _, d := range p.Domains {
		if d.Pattern.Match(name) {
			return d, true
		}
	}
	return Domain{}, false
}

// RuleFor returns the header rule for host name: the exact key, else the
// longest matching wildcard; ok is false when none matches.
func (p *Policy) RuleFor(name string) (HostRule, bool) {
	if p == nil {
		return HostRule{}, false
	}
	name = CanonicalName(name)
	for _, r := range p.Rules { // sorted most specific first by Parse
		if r.Pattern.Match(name) {
			return r, true
		}
	}
	return HostRule{}, false
}

// Secrets returns the names of the secrets p's rules refer to, sorted, without
// duplicates.
func (p *Policy) Secrets() []string {
	var out []string
	for _, r := range p.Rules {
		for _, h := range r.Headers {
			out = append(out, h.Value.Secrets()...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CanonicalName lower-cases a host name and drops a trailing dot and a port.
func CanonicalName(name string) string {
	if h, _, ok := strings.Cut(name, ":"); ok && !strings.Contains(name, "]") {
		name = h
	}
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// Pattern is a domain pattern: an exact name, or "*." and a suffix.
type Pattern string

// Match reports whether canonical name matches the pattern.
func (p Pattern) Match(name string) bool {
	s := string(p)
	if suffix, ok := strings.CutPrefix(s, "*."); ok {
		return strings.HasSuffix(name, "."+suffix)
	}
	return name == s
}

// wildcard reports whether p is a "*." pattern.
func (p Pattern) wildcard() bool { return strings.HasPrefix(string(p), "*.") }

// String returns the pattern as written (lower case).
func (p Pattern) String() string { return string(p) }

// FieldError is a validation error naming the wire field at fault
// ("network.allowOut[2]").
type FieldError struct {
	Field string
	Msg   string
}

// Error returns "<field>: <message>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
