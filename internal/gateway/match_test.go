package gateway

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/filesig"
	"github.com/cubby-dev/cubby/internal/sandboxid"
)

func TestMatch(t *testing.T) {
	g := New(newFakeControlPlane(), Config{Domain: "Example.Test."}, nil)
	t.Cleanup(g.CloseIdleConnections)
	type hdr = map[string]string
	cases := []struct {
		name    string
		target  string
		host    string
		headers hdr
		want    Route
		matched bool
		err     bool
	}{
		{"headers", "/x", "127.0.0.1:3001", hdr{HeaderSandboxID: "abc1", HeaderSandboxPort: "49983"}, Route{"abc1", 49983}, true, false},
		{"headers win over host", "/x", "8000-other.example.test", hdr{HeaderSandboxID: "abc1", HeaderSandboxPort: "49999"}, Route{"abc1", 49999}, true, false},
		{"header port zero", "/x", "localhost", hdr{HeaderSandboxID: "abc1", HeaderSandboxPort: "0"}, Route{}, true, true},
		{"header port too big", "/x", "localhost", hdr{HeaderSandboxID: "abc1", HeaderSandboxPort: "65536"}, Route{}, true, true},
		{"header port text", "/x", "localhost", hdr{HeaderSandboxID: "abc1", HeaderSandboxPort: "http"}, Route{}, true, true},
		{"header empty id", "/x", "localhost", hdr{HeaderSandboxID: "", HeaderSandboxPort: "49983"}, Route{}, true, true},
		{"only id", "/x", "localhost", hdr{HeaderSandboxID: "abc1"}, Route{}, true, true},
		{"only port", "/x", "localhost", hdr{HeaderSandboxPort: "49983"}, Route{}, true, true},
		{"host", "/x", "49999-abc1.example.test", nil, Route{"abc1", 49999}, true, false},
		{"host with port and case", "/x", "8080-ABC1.Other.Domain:443", nil, Route{"abc1", 8080}, true, false},
		{"host wins over lone header", "/x", "3000-abc1.example.test", hdr{HeaderSandboxID: "zzz"}, Route{"abc1", 3000}, true, false},
		{"localhost", "/x", "localhost:3000", nil, Route{}, false, false},
		{"ipv4", "/x", "127.0.0.1:3000", nil, Route{}, false, false},
		{"ipv6", "/x", "[::1]:3000", nil, Route{}, false, false},
		{"sandbox domain", "/x", "sandbox.example.test", nil, Route{}, false, false},
		{"api domain", "/x", "api.example.test:443", nil, Route{}, false, false},
		{"dash in non-port label", "/x", "my-gateway.example.test", nil, Route{}, false, false},
		{"port out of range", "/x", "70000-abc1.example.test", nil, Route{}, false, false},
		{"bad id", "/x", "49983-ab_c.example.test", nil, Route{}, false, false},
		{"id with dash", "/x", "49983-ab-c.example.test", nil, Route{}, false, false},
		{"no dot", "/x", "49983-abc1", nil, Route{}, false, false},
		{"unsigned files", "/files?path=/a", "localhost", nil, Route{}, true, true},
		{"files via headers", "/files?path=/a", "localhost", hdr{HeaderSandboxID: "abc1", HeaderSandboxPort: "49983"}, Route{"abc1", 49983}, true, false},
		{"files subpath is api", "/files/x", "localhost", nil, Route{}, false, false},
		{"api", "/v2/sandboxes", "localhost:3000", nil, Route{}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.target, nil)
			r.Host = tc.host
			for k, v := range tc.headers {
				r.Header.Set(k, v)
			}
			got, matched, err := g.Match(r)
			if (err != nil) != tc.err || matched != tc.matched || got != tc.want {
				t.Fatalf("Match = %+v, %v, %v; want %+v, %v, err=%v", got, matched, err, tc.want, tc.matched, tc.err)
			}
		})
	}
}

func TestMatchSignedOperations(t *testing.T) {
	cp := newFakeControlPlane()
	cp.set(Target{ID: "aaa", Addr: mustAddr("127.0.0.2"), Running: true, AccessToken: "tok-a"})
	cp.set(Target{ID: "bbb", Addr: mustAddr("127.0.0.3"), Running: true, AccessToken: "tok-b"})
	g := New(cp, Config{}, nil)
	t.Cleanup(g.CloseIdleConnections)

	read := url.QueryEscape(filesig.Sign("/p", filesig.OpRead, "", "tok-b", 0))
	write := url.QueryEscape(filesig.Sign("/p", filesig.OpWrite, "user", "tok-a", 1700000000))
	cases := []struct {
		method, target string
		want           Route
		err            bool
	}{
		{http.MethodGet, "/files?path=/p&signature=" + read, Route{"bbb", EnvdPort}, false},
		{http.MethodPost, "/files?path=/p&username=user&signature_expiration=1700000000&signature=" + write, Route{"aaa", EnvdPort}, false},
		{http.MethodPost, "/files?path=/p&signature=" + read, Route{}, true},                          // read signature used to write
		{http.MethodGet, "/files?path=/other&signature=" + read, Route{}, true},                       // path differs
		{http.MethodPut, "/files?path=/p&signature=" + read, Route{}, true},                           // method
		{http.MethodGet, "/files?path=/p&signature_expiration=soon&signature=" + read, Route{}, true}, // bad expiration
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		got, matched, err := g.Match(r)
		if !matched || (err != nil) != tc.err || got != tc.want {
			t.Errorf("%s %s: Match = %+v, %v, %v; want %+v err=%v", tc.method, tc.target, got, matched, err, tc.want, tc.err)
		}
	}
}

func FuzzMatchHost(f *testing.F) {
	for _, s := range []string{
		"49983-abc123.example.test", "49999-i1x2y3z4.e2b.app:443", "1-a.b", "65535-z.z", "65536-a.b",
		"0-a.b", "-a.b", "49983-.b", "49983-a.", "localhost", "127.0.0.1:80", "[::1]:3000", "::1",
		"sandbox.example.test", "api.example.test", "my-host.example.test", "0049983-abc.x", "8080-ABC.X.",
		"49983-abc", "a-b-c.d", "[49983-abc.d]", "49983-abc.example.test:99999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		route, ok := parseHost(host, "example.test")
		if !ok {
			return
		}
		if !sandboxid.Valid(route.SandboxID) || route.Port < 1 || route.Port > 65535 {
			t.Fatalf("parseHost(%q) = %+v: invalid route", host, route)
		}
		if !strings.Contains(strings.ToLower(host), "-"+route.SandboxID+".") {
			t.Fatalf("parseHost(%q) = %+v: id not taken from the host", host, route)
		}
		again, ok := parseHost(fmt.Sprintf("%d-%s.example.test", route.Port, route.SandboxID), "example.test")
		if !ok || again != route {
			t.Fatalf("round trip of %+v = %+v, %v", route, again, ok)
		}
		r := &http.Request{Method: http.MethodGet, Host: host, Header: http.Header{}}
		g := &Gateway{res: newFakeControlPlane(), domain: "example.test"}
		if got, matched, err := g.Match(r); err != nil || !matched || got != route {
			t.Fatalf("Match(Host %q) = %+v, %v, %v; want %+v", host, got, matched, err, route)
		}
	})
}
