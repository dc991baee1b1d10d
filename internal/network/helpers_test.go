package network

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/testenv/testnetns"
)

// requireRoot skips tests that create host network resources when not root.
func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (netns, bridge, nftables)")
	}
}

func randSuffix(tb testing.TB) string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func randInt(tb testing.TB, n int64) int64 {
	v, err := rand.Int(rand.Reader, big.NewInt(n))
	if err != nil {
		tb.Fatal(err)
	}
	return v.Int64()
}

// freePrefix picks a random 10.2xx.y.0/bits that overlaps no address or route on the host.
func freePrefix(tb testing.TB, bits int) netip.Prefix {
	tb.Helper()
	for range 50 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(200 + randInt(tb, 50)), byte(randInt(tb, 256)), 0}), bits)
		if !hostUses(tb, p) {
			return p
		}
	}
	tb.Fatal("no free test prefix found")
	return netip.Prefix{}
}

func hostUses(tb testing.TB, p netip.Prefix) bool {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		ones, _ := r.Dst.Mask.Size()
		a, _ := netip.AddrFromSlice(r.Dst.IP.To4())
		if ones > 0 && netip.PrefixFrom(a, ones).Overlaps(p) {
			return true
		}
	}
	return false
}

// newTestManager returns a Setup Manager on a unique bridge, subnet, table and
// prefix; everything it creates is removed in Cleanup.
func newTestManager(tb testing.TB) *Manager {
	tb.Helper()
	requireRoot(tb)
	sfx := randSuffix(tb)
	cfg := Config{
		Bridge: "cbt" + sfx,
		Subnet: freePrefix(tb, 24),
		Table:  "cubby_t" + sfx,
		Prefix: "cbt" + sfx + "-",
	}
	m := newManagerNoSetup(tb, cfg)
	if err := m.Setup(context.Background()); err != nil {
		tb.Fatalf("Setup: %v", err)
	}
	return m
}

// twoSandboxes returns a test Manager with sandboxes idA and idB attached.
func twoSandboxes(tb testing.TB, idA, idB string) (*Manager, Attachment, Attachment) {
	tb.Helper()
	m := newTestManager(tb)
	a, err := m.Attach(context.Background(), idA)
	must(tb, err)
	b, err := m.Attach(context.Background(), idB)
	must(tb, err)
	return m, a, b
}

// newManagerNoSetup returns a Manager for cfg whose host state (if any is
// created later) is swept and torn down in Cleanup.
func newManagerNoSetup(tb testing.TB, cfg Config) *Manager {
	tb.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := New(cfg, log)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	tb.Cleanup(func() {
		ctx := context.Background()
		if err := m.Sweep(ctx, nil); err != nil {
			tb.Errorf("cleanup Sweep: %v", err)
		}
		if err := m.Detach(ctx, EgressID); err != nil { // Sweep keeps it
			tb.Errorf("cleanup egress network: %v", err)
		}
		if err := m.Teardown(ctx); err != nil {
			tb.Errorf("cleanup Teardown: %v", err)
		}
		m.Close()
	})
	return m
}

// releaseClaim drops m's bridge lock as the exit of its process would, so that
// a Manager standing for a restarted server can claim the bridge.
func releaseClaim(m *Manager) { m.unlock() }

// inNetns runs fn inside the netns at path (testnetns.InNetns).
func inNetns(path string, fn func() error) error { return testnetns.InNetns(path, fn) }

// serveEcho listens on addr:0 (inside netns path if non-empty) and echoes one
// line back per connection, prefixed with the peer address: "<peer> <line>".
func serveEcho(tb testing.TB, nsPath string, addr netip.Addr) netip.AddrPort {
	return serveEchoAt(tb, nsPath, netip.AddrPortFrom(addr, 0))
}

// serveEchoAt is serveEcho on ap (port 0: one the kernel picks).
func serveEchoAt(tb testing.TB, nsPath string, ap netip.AddrPort) netip.AddrPort {
	tb.Helper()
	var ln net.Listener
	listen := func() (err error) {
		ln, err = net.Listen("tcp4", ap.String())
		return err
	}
	var err error
	if nsPath == "" {
		err = listen()
	} else {
		err = inNetns(nsPath, listen)
	}
	if err != nil {
		tb.Fatalf("listen on %s (netns %q): %v", ap, nsPath, err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				n, _ := c.Read(buf)
				host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
				fmt.Fprintf(c, "%s %s", host, buf[:n])
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// dialEcho connects to target (from inside netns nsPath if non-empty), sends
// "ping" and returns the peer address the server saw.
func dialEcho(nsPath string, target netip.AddrPort, timeout time.Duration) (string, error) {
	var c net.Conn
	dial := func() (err error) {
		c, err = net.DialTimeout("tcp4", target.String(), timeout)
		return err
	}
	var err error
	if nsPath == "" {
		err = dial()
	} else {
		err = inNetns(nsPath, dial)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("ping")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	if err != nil {
		return "", err
	}
	var peer, msg string
	if _, err := fmt.Sscanf(string(b), "%s %s", &peer, &msg); err != nil || msg != "ping" {
		return "", fmt.Errorf("bad echo %q", b)
	}
	return peer, nil
}

// uplink is a netns standing in for "the internet": connected to the host by
// a veth /30, host end .1, uplink end .2.
type uplink struct {
	path     string
	hostAddr netip.Addr
	addr     netip.Addr
}

func newUplink(tb testing.TB) uplink {
	tb.Helper()
	sfx := randSuffix(tb)
	p := freePrefix(tb, 30)
	u := uplink{path: "/run/netns/cbt" + sfx + "up", hostAddr: p.Addr().Next(), addr: p.Addr().Next().Next()}
	ns, err := createNetns(u.path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer ns.close()
	hostName := "cbt" + sfx + "u"
	tb.Cleanup(func() {
		if l, err := netlink.LinkByName(hostName); err == nil {
			netlink.LinkDel(l)
		}
		removeNetns(u.path)
	})
	attrs := netlink.NewLinkAttrs()
	attrs.Name = hostName
	attrs.Flags = net.FlagUp
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: "up0", PeerNamespace: netlink.NsFd(ns.fd)}
	must(tb, netlink.LinkAdd(veth))
	must(tb, netlink.AddrAdd(veth, &netlink.Addr{IPNet: ipnet(u.hostAddr, 30)}))
	peer, err := ns.nl.LinkByName("up0")
	must(tb, err)
	must(tb, ns.nl.AddrAdd(peer, &netlink.Addr{IPNet: ipnet(u.addr, 30)}))
	must(tb, ns.nl.LinkSetUp(peer))
	testnetns.WaitUp(tb, hostName)
	return u
}

// routeVia adds, inside the uplink netns, a route to p via the host.
func (u uplink) routeVia(tb testing.TB, p netip.Prefix) {
	tb.Helper()
	h, err := nsHandle(u.path)
	must(tb, err)
	defer h.Close()
	must(tb, h.RouteAdd(&netlink.Route{Dst: ipnet(p.Addr(), p.Bits()), Gw: u.hostAddr.AsSlice()}))
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

func isRefused(err error) bool { return errors.Is(err, unix.ECONNREFUSED) }

// readSysctl returns the trimmed value of /proc/sys/net/<rel> in the test's netns.
func readSysctl(tb testing.TB, rel string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(procNet, rel))
	must(tb, err)
	return strings.TrimSpace(string(b))
}

// readSysctlIn is readSysctl inside the netns at path.
func readSysctlIn(tb testing.TB, path, rel string) string {
	tb.Helper()
	var v string
	must(tb, inNetns(path, func() error {
		b, err := os.ReadFile(filepath.Join(procNet, rel))
		v = strings.TrimSpace(string(b))
		return err
	}))
	return v
}

// assertNeigh checks that list holds a permanent entry ip -> mac.
func assertNeigh(tb testing.TB, where string, list func() ([]netlink.Neigh, error), ip netip.Addr, mac net.HardwareAddr) {
	tb.Helper()
	ns, err := list()
	must(tb, err)
	for _, n := range ns {
		if n.IP.Equal(ip.AsSlice()) && n.State == netlink.NUD_PERMANENT && bytes.Equal(n.HardwareAddr, mac) {
			return
		}
	}
	tb.Errorf("%s: no permanent neighbour %s -> %s in %v", where, ip, mac, ns)
}

// assertHostNeigh checks that a's host link holds a permanent neighbour entry
// for a's address with the MAC of its eth0.
func assertHostNeigh(tb testing.TB, a Attachment) {
	tb.Helper()
	link, err := netlink.LinkByName(a.HostVeth)
	must(tb, err)
	h, err := nsHandle(a.NetnsPath)
	must(tb, err)
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	must(tb, err)
	assertNeigh(tb, "host link "+a.HostVeth, func() ([]netlink.Neigh, error) { return netlink.NeighList(link.Attrs().Index, netlink.FAMILY_V4) },
		a.Addr, eth.Attrs().HardwareAddr)
}

// assertRoute checks that list holds a route to dst (invalid = default) with
// gateway gw and preferred source src (either invalid = none).
func assertRoute(tb testing.TB, where string, list func() ([]netlink.Route, error), dst netip.Prefix, gw, src netip.Addr) {
	tb.Helper()
	rs, err := list()
	must(tb, err)
	for _, r := range rs {
		isDst := (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && !dst.IsValid() || r.Dst != nil && r.Dst.String() == dst.String()
		if isDst && ipEq(r.Gw, gw) && ipEq(r.Src, src) {
			return
		}
	}
	tb.Errorf("%s: no route to %v via %v src %v in %v", where, dst, gw, src, rs)
}

func ipEq(ip net.IP, a netip.Addr) bool {
	if !a.IsValid() {
		return len(ip) == 0
	}
	return ip.Equal(a.AsSlice())
}
