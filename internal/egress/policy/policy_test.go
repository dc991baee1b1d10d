package policy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func mustParse(t *testing.T, s Spec) *Policy {
	t.Helper()
	p, err := Parse(s)
	if err != nil {
		t.Fatalf("Parse(%+v): %v", s, err)
	}
	return p
}

func TestDecidePrecedence(t *testing.T) {
	p := mustParse(t, Spec{
		AllowOut: []string{"198.18.0.7", "10.1.0.0/16", "allowed.test", "*.wild.test"},
		DenyOut:  []string{"0.0.0.0/0"},
	})
	cases := []struct {
		name, host string
		dst        string
		allow      bool
		rule       string
		byName     bool
	}{
		{"allowed address beats deny all", "", "198.18.0.7", true, "allowOut[0] 198.18.0.7/32", false},
		{"allowed CIDR", "whatever.example", "10.1.2.3", true, "allowOut[1] 10.1.0.0/16", false},
		{"allowed domain, any address", "allowed.test", "203.0.113.9", true, "allowOut[2] allowed.test", true},
		{"domain is case and dot insensitive", "ALLOWED.test.", "203.0.113.9", true, "allowOut[2] allowed.test", true},
		{"host header with port", "allowed.test:80", "203.0.113.9", true, "allowOut[2] allowed.test", true},
		{"wildcard one level", "a.wild.test", "203.0.113.9", true, "allowOut[3] *.wild.test", true},
		{"wildcard deep", "a.b.c.wild.test", "203.0.113.9", true, "allowOut[3] *.wild.test", true},
		{"wildcard not apex", "wild.test", "203.0.113.9", false, "denyOut[0] 0.0.0.0/0", false},
		{"suffix is not a subdomain", "evilwild.test", "203.0.113.9", false, "denyOut[0] 0.0.0.0/0", false},
		{"exact not subdomain", "x.allowed.test", "203.0.113.9", false, "denyOut[0] 0.0.0.0/0", false},
		{"no name", "", "203.0.113.9", false, "denyOut[0] 0.0.0.0/0", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Decide(c.host, netip.MustParseAddr(c.dst))
			if d.Allow != c.allow || d.Rule != c.rule || d.ByName != c.byName {
				t.Fatalf("Decide(%q, %s) = %+v, want allow=%v rule=%q byName=%v", c.host, c.dst, d, c.allow, c.rule, c.byName)
			}
		})
	}
}

func TestDecideDefaultsAndInternet(t *testing.T) {
	var zero *Policy
	if d := zero.Decide("x", netip.MustParseAddr("1.2.3.4")); !d.Allow || d.Rule != "" {
		t.Fatalf("nil policy: %+v", d)
	}
	p := mustParse(t, Spec{DenyOut: []string{"192.0.2.0/24"}})
	if d := p.Decide("", netip.MustParseAddr("192.0.2.9")); d.Allow || d.Rule != "denyOut[0] 192.0.2.0/24" {
		t.Fatalf("denied CIDR: %+v", d)
	}
	if d := p.Decide("", netip.MustParseAddr("192.0.3.9")); !d.Allow || d.Rule != "" {
		t.Fatalf("outside denied CIDR: %+v", d)
	}
	off := false
	p = mustParse(t, Spec{AllowInternet: &off, AllowOut: []string{"198.18.0.0/15"}})
	if !p.DeniesAll() || p.BlocksAll() {
		t.Fatalf("allow_internet_access=false with an allowed CIDR: DeniesAll %v BlocksAll %v", p.DeniesAll(), p.BlocksAll())
	}
	if d := p.Decide("", netip.MustParseAddr("8.8.8.8")); d.Allow || d.Rule != "allow_internet_access 0.0.0.0/0" {
		t.Fatalf("no internet: %+v", d)
	}
	if p := mustParse(t, Spec{AllowInternet: &off}); !p.BlocksAll() || p.NeedsProxy() {
		t.Fatalf("allow_internet_access=false alone must block all without a proxy")
	}
}

func TestResolvable(t *testing.T) {
	p := mustParse(t, Spec{AllowOut: []string{"allowed.test", "*.wild.test", "198.18.0.1"}, DenyOut: []string{AllTraffic}})
	for name, want := range map[string]bool{"allowed.test": true, "x.wild.test": true, "denied.test": false, "wild.test": false, "": false} {
		if ok, _ := p.Resolvable(name); ok != want {
			t.Errorf("Resolvable(%q) = %v, want %v", name, ok, want)
		}
	}
	open := mustParse(t, Spec{DenyOut: []string{"10.0.0.0/8"}})
	if ok, _ := open.Resolvable("anything.example"); !ok {
		t.Error("a policy that does not deny all traffic must resolve every name")
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	cases := []struct {
		spec  Spec
		field string
	}{
		{Spec{AllowOut: []string{"not a domain"}}, "network.allowOut[0]"},
		{Spec{AllowOut: []string{"10.0.0.0/33"}}, "network.allowOut[0]"},
		{Spec{AllowOut: []string{"1.2.3.4", "*"}}, "network.allowOut[1]"},
		{Spec{AllowOut: []string{"a.*.example.com"}, DenyOut: []string{AllTraffic}}, "network.allowOut[0]"},
		{Spec{AllowOut: []string{"::1"}}, "network.allowOut[0]"},
		{Spec{DenyOut: []string{"0.0.0.0/0", "example.com"}}, "network.denyOut[1]"},
		{Spec{DenyOut: []string{"300.1.1.1"}}, "network.denyOut[0]"},
		{Spec{AllowOut: []string{"allowed.test"}}, "network.allowOut"},
		{Spec{Rules: map[string][]Transform{"*": nil}}, `network.rules["*"]`},
		{Spec{Rules: map[string][]Transform{"1.2.3.4": nil}}, `network.rules["1.2.3.4"]`},
		{Spec{Rules: map[string][]Transform{"a.test": {{Headers: map[string]string{"Bad Name": "x"}}}}},
			`network.rules["a.test"][0].transform.headers["Bad Name"]`},
		{Spec{Rules: map[string][]Transform{"a.test": {{}, {Headers: map[string]string{"Host": "x"}}}}},
			`network.rules["a.test"][1].transform.headers["Host"]`},
		{Spec{Rules: map[string][]Transform{"a.test": {{Headers: map[string]string{"X-A": "a\r\nX-B: b"}}}}},
			`network.rules["a.test"][0].transform.headers["X-A"]`},
		{Spec{Rules: map[string][]Transform{"a.test": {{Headers: map[string]string{"X-A": "${e2b.identity.tokens.aws}"}}}}},
			`network.rules["a.test"][0].transform.headers["X-A"]`},
		{Spec{Rules: map[string][]Transform{"a.test": {{Headers: map[string]string{"X-A": "Bearer ${e2b.secrets.key"}}}}},
			`network.rules["a.test"][0].transform.headers["X-A"]`},
		{Spec{Rules: map[string][]Transform{"a.test": nil, "A.test.": nil}}, `network.rules[`},
		{Spec{EgressProxy: &Upstream{Address: "proxy"}}, "network.egressProxy.address"},
		{Spec{EgressProxy: &Upstream{Address: "proxy:0"}}, "network.egressProxy.address"},
		{Spec{EgressProxy: &Upstream{Address: "proxy:1080", Password: "p"}}, "network.egressProxy.password"},
	}
	for _, c := range cases {
		_, err := Parse(c.spec)
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, c.field) {
			t.Errorf("Parse(%+v) = %v, want a FieldError for %s", c.spec, err, c.field)
		}
	}
}

func TestRuleForMostSpecific(t *testing.T) {
	h := func(v string) []Transform { return []Transform{{Headers: map[string]string{"x-rule": v}}} }
	p := mustParse(t, Spec{Rules: map[string][]Transform{
		"*.test": h("short"), "*.api.test": h("long"), "api.test": h("exact"), "x.api.test": h("exact-x"),
	}})
	for name, want := range map[string]string{
		"api.test": "exact", "x.api.test": "exact-x", "y.api.test": "long", "z.y.api.test": "long", "other.test": "short",
	} {
		r, ok := p.RuleFor(name)
		if !ok || len(r.Headers) != 1 || string(r.Headers[0].Value) != want || r.Headers[0].Name != "X-Rule" {
			t.Errorf("RuleFor(%q) = %+v %v, want %s", name, r, ok, want)
		}
	}
	if _, ok := p.RuleFor("test"); ok {
		t.Error("a wildcard must not match its apex")
	}
}

func TestTemplateExpand(t *testing.T) {
	tpl, err := ParseTemplate("f", "Bearer ${e2b.secrets.OpenAI-Key} and ${e2b.secrets.b} ${literal}")
	if err != nil {
		t.Fatal(err)
	}
	if got := tpl.Secrets(); !reflect.DeepEqual(got, []string{"openai-key", "b"}) {
		t.Fatalf("Secrets = %v", got)
	}
	vals := map[string]string{"openai-key": "sk-1", "b": "two"}
	out, err := tpl.Expand(func(n string) (string, error) {
		if v, ok := vals[n]; ok {
			return v, nil
		}
		return "", ErrUnknownSecret
	})
	if err != nil || out != "Bearer sk-1 and two ${literal}" {
		t.Fatalf("Expand = %q, %v", out, err)
	}
	if _, err := tpl.Expand(func(string) (string, error) { return "", ErrUnknownSecret }); !errors.Is(err, ErrUnknownSecret) {
		t.Fatalf("missing secret: %v", err)
	}
	if _, err := tpl.Expand(func(string) (string, error) { return "a\r\nX-Injected: 1", nil }); err == nil {
		t.Fatal("a value with CRLF must not expand into a header")
	}
}

func TestPolicyJSONRoundTrip(t *testing.T) {
	p := mustParse(t, Spec{
		AllowOut: []string{"198.18.0.0/15", "*.a.test"}, DenyOut: []string{AllTraffic},
		Rules:       map[string][]Transform{"a.test": {{Headers: map[string]string{"Authorization": "Bearer ${e2b.secrets.k}"}}}},
		EgressProxy: &Upstream{Address: "socks.test:1080", Username: "u", Password: "p"},
	})
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Policy
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*p, back) {
		t.Fatalf("round trip:\n%+v\n%+v", *p, back)
	}
	if !back.NeedsProxy() || !back.NeedsProxyForAllTCP() || !reflect.DeepEqual(back.Secrets(), []string{"k"}) {
		t.Fatalf("flags after round trip: %+v", back)
	}
}

func TestValidSecretName(t *testing.T) {
	for _, ok := range []string{"openai-key", "A.B_c", "ключ"} {
		if err := ValidSecretName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "a}b", "{x", "sec_abc", "a b", "a\nb", strings.Repeat("x", 129)} {
		if err := ValidSecretName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
