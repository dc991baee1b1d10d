package gateway

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeControlPlane is a test double of the control plane's in-memory route table
// (the real one is the control-plane service); it implements Resolver.
type fakeControlPlane struct {
	mu      sync.Mutex
	targets map[string]Target
}

func newFakeControlPlane() *fakeControlPlane {
	return &fakeControlPlane{targets: make(map[string]Target)}
}

func (f *fakeControlPlane) set(t Target) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets[t.ID] = t
}

func (f *fakeControlPlane) kill(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.targets, id)
}

func (f *fakeControlPlane) Resolve(id string) (Target, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.targets[id]
	return t, ok
}

func (f *fakeControlPlane) Targets() []Target {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Target, 0, len(f.targets))
	for _, t := range f.targets {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Target) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// listenLoopback listens on a random 127.x.y.z address (never 127.0.0.1, which other
// programs on this shared machine use) and the given port (0 = ephemeral).
func listenLoopback(t *testing.T, port int) net.Listener {
	t.Helper()
	var lastErr error
	for range 30 {
		addr := netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(254)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
		ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, uint16(port)).String())
		if err == nil {
			return ln
		}
		lastErr = err
		if !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
	}
	t.Fatalf("listen on loopback port %d: %v", port, lastErr)
	return nil
}

// fakeSandbox is a real HTTP server on a loopback address standing in for a sandbox port.
type fakeSandbox struct {
	addr netip.Addr
	port int
}

func startSandbox(t *testing.T, port int, h http.Handler) fakeSandbox {
	t.Helper()
	ln := listenLoopback(t, port)
	srv := httptest.NewUnstartedServer(h)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return fakeSandbox{addr: ap.Addr(), port: int(ap.Port())}
}

// randomID returns a sandbox-shaped ID ([a-z0-9]{20}) with a "t" prefix.
func randomID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte("t")
	for len(b) < 20 {
		b = append(b, alphabet[rand.IntN(len(alphabet))])
	}
	return string(b)
}

// testEnv is a gateway served on one loopback listener in front of an "api" handler.
type testEnv struct {
	cp     *fakeControlPlane
	gw     *Gateway
	srv    *httptest.Server
	client *http.Client
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	cp := newFakeControlPlane()
	gw := New(cp, Config{Domain: "example.test"}, nil)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "api")
	})
	srv := httptest.NewUnstartedServer(gw.Handler(api))
	_ = srv.Listener.Close()
	srv.Listener = listenLoopback(t, 0)
	srv.Config.ConnContext = gw.ConnContext
	srv.Start()
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
		gw.CloseIdleConnections()
	})
	return &testEnv{cp: cp, gw: gw, srv: srv, client: &http.Client{Transport: tr}}
}

// request builds a request to the gateway routed by headers to (id, port).
func (e *testEnv) request(t *testing.T, method, path, id string, port int, body string) *http.Request {
	t.Helper()
	var r *http.Request
	var err error
	if body == "" {
		r, err = http.NewRequest(method, e.srv.URL+path, nil)
	} else {
		r, err = http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	}
	if err != nil {
		t.Fatal(err)
	}
	if id != "" {
		r.Header.Set(HeaderSandboxID, id)
		r.Header.Set(HeaderSandboxPort, fmt.Sprint(port))
	}
	return r
}
