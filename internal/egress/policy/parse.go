package policy

import (
	"fmt"
	"net"
	"net/netip"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Parse validates s and returns its Policy. Errors are *FieldError values
// naming the first field at fault by its wire name under "network." (for
// example network.allowOut[2], network.rules["api.example.com"][0].transform.headers["X-Key"]).
func Parse(s Spec) (*Policy, error) {
	p := &Policy{}
	if len(s.AllowOut) > MaxEntries || len(s.DenyOut) > MaxEntries {
		return nil, fieldErr("network", "allowOut and denyOut take at most %d entries each", MaxEntries)
	}
	for i, e := range s.AllowOut {
		field := fmt.Sprintf("allowOut[%d]", i)
		if pfx, ok, err := parseNet("network."+field, e); err != nil {
			return nil, err
		} else if ok {
			p.Allow = append(p.Allow, Net{Prefix: pfx, Field: field})
			continue
		}
		pat, err := ParsePattern("network."+field, e)
		if err != nil {
			return nil, fieldErr("network."+field, "%q is not an IPv4 address, CIDR or domain name (%s)", e, err.(*FieldError).Msg)
		}
		p.Domains = append(p.Domains, Domain{Pattern: pat, Field: field})
	}
	for i, e := range s.DenyOut {
		field := fmt.Sprintf("denyOut[%d]", i)
		pfx, ok, err := parseNet("network."+field, e)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fieldErr("network."+field, "%q: denyOut takes IPv4 addresses and CIDRs only, not domain names", e)
		}
		p.Deny = append(p.Deny, Net{Prefix: pfx, Field: field})
	}
	if s.AllowInternet != nil && !*s.AllowInternet {
		p.Deny = append(p.Deny, Net{Prefix: netip.MustParsePrefix(AllTraffic), Field: "allow_internet_access"})
	}
	if len(p.Domains) > 0 && !p.DeniesAll() {
		return nil, fieldErr("network.allowOut", "domain entries (%s) only restrict traffic when network.denyOut contains %q (all traffic): add it, or the sandbox may reach every domain",
			p.Domains[0].Pattern, AllTraffic)
	}
	rules, err := parseRules(s.Rules)
	if err != nil {
		return nil, err
	}
	p.Rules = rules
	if s.EgressProxy != nil {
		if err := validUpstream(*s.EgressProxy); err != nil {
			return nil, err
		}
		up := *s.EgressProxy
		p.Proxy = &up
	}
	return p, nil
}

// parseNet parses an IPv4 address or CIDR; ok is false when e is neither
// (it may be a domain). IPv6 entries are errors: sandboxes have no IPv6.
func parseNet(field, e string) (netip.Prefix, bool, error) {
	if a, err := netip.ParseAddr(e); err == nil {
		if !a.Is4() {
			return netip.Prefix{}, false, fieldErr(field, "%q: only IPv4 is supported (sandboxes have no IPv6)", e)
		}
		return netip.PrefixFrom(a, 32), true, nil
	}
	if strings.Contains(e, "/") {
		pfx, err := netip.ParsePrefix(e)
		if err != nil {
			return netip.Prefix{}, false, fieldErr(field, "%q is not a valid CIDR: %v", e, err)
		}
		if !pfx.Addr().Is4() {
			return netip.Prefix{}, false, fieldErr(field, "%q: only IPv4 is supported (sandboxes have no IPv6)", e)
		}
		return pfx.Masked(), true, nil
	}
	return netip.Prefix{}, false, nil
}

// ParsePattern validates a domain name or "*.domain" wildcard (ASCII; IDNs
// in their xn-- form) and returns it lower-cased without a trailing dot.
// Errors are *FieldError values naming field.
func ParsePattern(field, s string) (Pattern, error) {
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	rest, wild := strings.CutPrefix(name, "*.")
	switch {
	case name == "" || name == "*":
		return "", fieldErr(field, "%q is not a domain pattern (a bare \"*\" is not allowed)", s)
	case len(name) > 253:
		return "", fieldErr(field, "domain %q is longer than 253 bytes", s)
	case strings.Contains(rest, "*"):
		return "", fieldErr(field, "%q: a wildcard may only be a leading \"*.\"", s)
	}
	if _, err := netip.ParseAddr(rest); err == nil {
		return "", fieldErr(field, "%q is an address, not a domain name", s)
	}
	for _, label := range strings.Split(rest, ".") {
		if err := validLabel(label); err != nil {
			return "", fieldErr(field, "%q: %v", s, err)
		}
	}
	if wild {
		return Pattern("*." + rest), nil
	}
	return Pattern(rest), nil
}

func validLabel(l string) error {
	if l == "" || len(l) > 63 {
		return fmt.Errorf("label %q must be 1-63 characters", l)
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
		if !ok {
			return fmt.Errorf("label %q has a character other than a-z, 0-9, '-' and '_'", l)
		}
	}
	if l[0] == '-' || l[len(l)-1] == '-' {
		return fmt.Errorf("label %q starts or ends with '-'", l)
	}
	return nil
}

// forbiddenHeaders are headers a rule may not set: they decide where a request
// goes or how it is framed.
var forbiddenHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade",
	"Te", "Trailer", "Keep-Alive", "Proxy-Connection", "Expect"}

// parseRules validates rules and sorts them: exact keys first, then wildcards
// by decreasing length (so the first match is the most specific).
func parseRules(rules map[string][]Transform) ([]HostRule, error) {
	if len(rules) > MaxRuleHosts {
		return nil, fieldErr("network.rules", "at most %d domains", MaxRuleHosts)
	}
	var out []HostRule
	for key, list := range rules {
		field := "network.rules[" + strconv.Quote(key) + "]"
		pat, err := ParsePattern(field, key)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(out, func(r HostRule) bool { return r.Pattern == pat }) {
			return nil, fieldErr(field, "the domain %q is given twice (keys are case-insensitive)", pat)
		}
		if len(list) > MaxRulesPerHost {
			return nil, fieldErr(field, "at most %d rules per domain", MaxRulesPerHost)
		}
		hr := HostRule{Pattern: pat}
		for i, t := range list {
			hs, err := parseHeaders(fmt.Sprintf("%s[%d].transform.headers", field, i), t.Headers)
			if err != nil {
				return nil, err
			}
			hr.Headers = append(hr.Headers, hs...)
		}
		out = append(out, hr)
	}
	slices.SortFunc(out, func(a, b HostRule) int {
		if a.Pattern.wildcard() != b.Pattern.wildcard() {
			if a.Pattern.wildcard() {
				return 1
			}
			return -1
		}
		if d := len(b.Pattern) - len(a.Pattern); d != 0 {
			return d
		}
		return strings.Compare(string(a.Pattern), string(b.Pattern))
	})
	return out, nil
}

// parseHeaders validates one transform's headers, sorted by name.
func parseHeaders(field string, headers map[string]string) ([]Header, error) {
	if len(headers) > MaxHeaders {
		return nil, fieldErr(field, "at most %d headers per rule", MaxHeaders)
	}
	var out []Header
	for name, value := range headers {
		f := field + "[" + strconv.Quote(name) + "]"
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, fieldErr(f, "%q is not a valid header name", name)
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if slices.Contains(forbiddenHeaders, canon) {
			return nil, fieldErr(f, "a rule may not set %s", canon)
		}
		tpl, err := ParseTemplate(f, value)
		if err != nil {
			return nil, err
		}
		out = append(out, Header{Name: canon, Value: tpl})
	}
	slices.SortFunc(out, func(a, b Header) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// validUpstream checks an egressProxy.
func validUpstream(u Upstream) error {
	host, port, err := net.SplitHostPort(u.Address)
	if err != nil || host == "" {
		return fieldErr("network.egressProxy.address", "%q is not host:port", u.Address)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fieldErr("network.egressProxy.address", "port %q is not 1-65535", port)
	}
	if a, err := netip.ParseAddr(host); err == nil && !a.Is4() {
		return fieldErr("network.egressProxy.address", "%q: only IPv4 is supported", host)
	} else if err != nil {
		if _, err := ParsePattern("network.egressProxy.address", host); err != nil {
			return err
		}
	}
	switch {
	case len(u.Username) > 255:
		return fieldErr("network.egressProxy.username", "at most 255 bytes")
	case len(u.Password) > 255:
		return fieldErr("network.egressProxy.password", "at most 255 bytes")
	case u.Password != "" && u.Username == "":
		return fieldErr("network.egressProxy.password", "a password needs a username")
	}
	return nil
}
