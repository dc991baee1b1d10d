package runsc

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/cubby-dev/cubby/internal/runtime/oci"
	"github.com/cubby-dev/cubby/internal/runtime/runtimetest"
)

// netPair is a sandbox netns whose eth0 (10.99.0.2/24, default route via
// 10.99.0.1) is a veth to a "host" netns holding 10.99.0.1; both are created for
// the test only, so no traffic leaves them.
type netPair struct {
	sandbox, host string // names under /run/netns
}

func (p netPair) sandboxPath() string { return "/run/netns/" + p.sandbox }

func ip(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %s: %v", strings.Join(args, " "), out, err)
	}
}

func newNetPair(t testing.TB) netPair {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	s := runtimetest.Suffix(t)
	p := netPair{sandbox: s + "s", host: s + "h"}
	for _, ns := range []string{p.sandbox, p.host} {
		ip(t, "netns", "add", ns)
		t.Cleanup(func() { ip(t, "netns", "del", ns) })
	}
	ip(t, "link", "add", s+"v", "netns", p.host, "type", "veth", "peer", "name", "eth0", "netns", p.sandbox)
	ip(t, "-n", p.host, "addr", "add", "10.99.0.1/24", "dev", s+"v")
	ip(t, "-n", p.host, "link", "set", s+"v", "up")
	ip(t, "-n", p.sandbox, "addr", "add", "10.99.0.2/24", "dev", "eth0")
	ip(t, "-n", p.sandbox, "link", "set", "eth0", "up")
	ip(t, "-n", p.sandbox, "link", "set", "lo", "up")
	ip(t, "-n", p.sandbox, "route", "add", "default", "via", "10.99.0.1")
	return p
}

// listenIn opens a TCP listener on addr inside the named netns and serves HTTP,
// counting requests.
func listenIn(t testing.TB, nsName, addr string) *atomic.Int64 {
	t.Helper()
	lnc, errc := make(chan net.Listener, 1), make(chan error, 1)
	go func() { // a thread of its own: it is thrown away if it cannot switch back
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		ns, err := netns.GetFromName(nsName)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		ln, err := net.Listen("tcp", addr)
		if err := netns.Set(orig); err == nil {
			runtime.UnlockOSThread()
		}
		if err != nil {
			errc <- err
			return
		}
		lnc <- ln
	}()
	var ln net.Listener
	select {
	case ln = <-lnc:
	case err := <-errc:
		t.Fatal(err)
	}
	var hits atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.Write([]byte("pong\n"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &hits
}

// TestNetworkAcrossCheckpoint (busybox nc: the static busybox's wget segfaults
// under gVisor) checks that the netstack sandbox reaches a server
// in the peer namespace, that the namespace gets its address back when the
// sandbox is gone, and that the restored sandbox reaches the server again.
func TestNetworkAcrossCheckpoint(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	p := newNetPair(t)
	hits := listenIn(t, p.host, "10.99.0.1:8080")
	sb := e.start(t, oci.Options{NetNSPath: p.sandboxPath(), Args: runtimetest.Shell(
		`while :; do printf "GET / HTTP/1.0\r\n\r\n" | nc 10.99.0.1 8080 >/dev/null && echo net-ok; sleep 0.1; done`)})
	waitFor(t, "a request from the sandbox", func() bool { return hits.Load() > 0 })
	waitLog(t, sb, "net-ok")
	// runsc took the address over (deleted it from the namespace): what the Runtime
	// must put back.
	if c, err := ReadNetConfig(p.sandboxPath()); err != nil || c.HasAddrs() {
		t.Fatalf("netns while runsc runs: %+v %v, want no address", c, err)
	}

	img := t.TempDir()
	if err := e.RT.Checkpoint(ctx, sb.ID, img); err != nil {
		t.Fatal(err)
	}
	assertConfigured(t, p)
	before := hits.Load()
	if err := e.RT.Restore(ctx, sb.ID, sb.Dir, img, sb.Out); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a request from the restored sandbox", func() bool { return hits.Load() > before })
	if err := e.RT.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	assertConfigured(t, p)
}

// assertConfigured checks that eth0 of the sandbox netns has its address and
// default route again.
func assertConfigured(t *testing.T, p netPair) {
	t.Helper()
	c, err := ReadNetConfig(p.sandboxPath())
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Links) != 1 || c.Links[0].Name != "eth0" || len(c.Links[0].Addrs) != 1 ||
		c.Links[0].Addrs[0] != "10.99.0.2/24" {
		t.Fatalf("netns config %+v, want eth0 10.99.0.2/24", c)
	}
	var def bool
	for _, r := range c.Links[0].Routes {
		def = def || (r.Dst == "" && r.Gw == "10.99.0.1")
	}
	if !def {
		t.Errorf("no default route via 10.99.0.1: %+v", c.Links[0].Routes)
	}
}

func TestNetConfigRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	p := newNetPair(t)
	want, err := ReadNetConfig(p.sandboxPath())
	if err != nil {
		t.Fatal(err)
	}
	ip(t, "-n", p.sandbox, "addr", "flush", "dev", "eth0")
	if c, _ := ReadNetConfig(p.sandboxPath()); c.HasAddrs() || len(c.Links[0].Routes) > 0 {
		t.Fatalf("flush left %+v", c)
	}
	for range 2 { // idempotent
		if err := want.Apply(p.sandboxPath()); err != nil {
			t.Fatal(err)
		}
	}
	assertConfigured(t, p)
	if err := (NetConfig{Links: []LinkConfig{{Name: "nope0"}}}).Apply(p.sandboxPath()); err == nil {
		t.Error("Apply to a missing interface succeeded")
	}
}
