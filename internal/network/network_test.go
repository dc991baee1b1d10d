package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestAttachConfiguresBothEnds(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	a, err := m.Attach(ctx, "sa")
	must(t, err)
	if !m.cfg.Subnet.Contains(a.Addr) || a.Addr == a.Gateway || a.Gateway != m.cfg.Subnet.Addr().Next() {
		t.Fatalf("bad addresses: %+v in %s", a, m.cfg.Subnet)
	}
	if err := isNetns(a.NetnsPath); err != nil {
		t.Fatal(err)
	}
	if len(a.HostVeth) > 15 || a.HostVeth != m.HostVeth("sa") {
		t.Fatalf("host veth name %q (HostVeth %q)", a.HostVeth, m.HostVeth("sa"))
	}
	veth, err := netlink.LinkByName(a.HostVeth)
	must(t, err)
	if veth.Attrs().MasterIndex != 0 || veth.Attrs().RawFlags&unix.IFF_UP == 0 || veth.Attrs().RawFlags&unix.IFF_NOARP == 0 {
		t.Fatalf("host veth %s: master %d, flags %#x; want a standalone up NOARP link", a.HostVeth, veth.Attrs().MasterIndex, veth.Attrs().RawFlags)
	}
	if veth.Attrs().Alias != m.aliasPrefix()+"sa" {
		t.Fatalf("veth alias %q", veth.Attrs().Alias)
	}
	for _, sc := range hostLinkSysctls {
		if got := readSysctl(t, fmt.Sprintf(sc.Path, a.HostVeth)); got != sc.Value {
			t.Errorf("%s on %s = %q, want %q", sc.Path, a.HostVeth, got, sc.Value)
		}
	}
	if v6, _ := netlink.AddrList(veth, netlink.FAMILY_V6); len(v6) != 0 {
		t.Errorf("host veth has IPv6 addresses %v", v6)
	}
	assertRoute(t, "host", func() ([]netlink.Route, error) { return netlink.RouteList(veth, netlink.FAMILY_V4) },
		netip.PrefixFrom(a.Addr, 32), netip.Addr{}, a.Gateway)
	checkSandboxEnd(t, a, veth)
	assertRegistered(t, m, a, true)
	if got, err := m.Addr("sa"); err != nil || got != a.Addr {
		t.Fatalf("Addr = %v, %v; want %s", got, err, a.Addr)
	}
	if _, err := m.Attach(ctx, "sa"); !errors.Is(err, ErrAlreadyAttached) {
		t.Fatalf("second Attach: %v, want ErrAlreadyAttached", err)
	}
}

// checkSandboxEnd checks the netns side of a: eth0 holds only Addr/32, no
// IPv6, a link route to the gateway and the default route via it, a permanent
// gateway neighbour for the host link's MAC (and the host link one for eth0's),
// and ping_group_range open to every gid (only there, not on the host).
func checkSandboxEnd(t *testing.T, a Attachment, hostLink netlink.Link) {
	t.Helper()
	h, err := nsHandle(a.NetnsPath)
	must(t, err)
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	must(t, err)
	assertHostNeigh(t, a)
	assertNeigh(t, "sandbox", func() ([]netlink.Neigh, error) { return h.NeighList(eth.Attrs().Index, netlink.FAMILY_V4) },
		a.Gateway, hostLink.Attrs().HardwareAddr)
	v4, err := h.AddrList(eth, netlink.FAMILY_V4)
	must(t, err)
	if len(v4) != 1 || v4[0].IPNet.String() != netip.PrefixFrom(a.Addr, 32).String() {
		t.Fatalf("eth0 IPv4 addresses %v, want %s/32", v4, a.Addr)
	}
	if v6, _ := h.AddrList(eth, netlink.FAMILY_V6); len(v6) != 0 {
		t.Fatalf("eth0 has IPv6 addresses %v, want none", v6)
	}
	routes := func() ([]netlink.Route, error) { return h.RouteList(eth, netlink.FAMILY_V4) }
	assertRoute(t, "sandbox", routes, netip.PrefixFrom(a.Gateway, 32), netip.Addr{}, netip.Addr{})
	assertRoute(t, "sandbox", routes, netip.Prefix{}, a.Gateway, netip.Addr{})
	if got := readSysctlIn(t, a.NetnsPath, "ipv4/ping_group_range"); got != "0\t2147483647" {
		t.Errorf("ping_group_range in netns = %q", got)
	}
	if got := readSysctl(t, "ipv4/ping_group_range"); got == "0\t2147483647" {
		t.Errorf("ping_group_range changed on the host")
	}
}

func TestIsolation(t *testing.T) {
	_, a, b := twoSandboxes(t, "sa", "sb")

	t.Run("host to sandbox", func(t *testing.T) {
		srv := serveEcho(t, a.NetnsPath, a.Addr)
		if _, err := dialEcho("", srv, 5*time.Second); err != nil {
			t.Fatalf("host -> A %s: %v", srv, err)
		}
	})
	t.Run("sandbox to host refused", func(t *testing.T) {
		srv := serveEcho(t, "", a.Gateway)
		if _, err := dialEcho("", srv, 5*time.Second); err != nil {
			t.Fatalf("sanity: host -> own gateway listener %s: %v", srv, err)
		}
		_, err := dialEcho(a.NetnsPath, srv, 5*time.Second)
		if !isRefused(err) {
			t.Fatalf("A -> host %s: %v, want connection refused by the input chain", srv, err)
		}
	})
	t.Run("sandbox to sandbox refused", func(t *testing.T) {
		srv := serveEcho(t, b.NetnsPath, b.Addr)
		if _, err := dialEcho("", srv, 5*time.Second); err != nil {
			t.Fatalf("sanity: host -> B %s: %v", srv, err)
		}
		if _, err := dialEcho(a.NetnsPath, srv, 5*time.Second); !isRefused(err) {
			t.Fatalf("A -> B %s: %v, want refused by the forward chain", srv, err)
		}
	})
	t.Run("unallocated subnet address refused", func(t *testing.T) {
		free := b.Addr.Next().Next()
		if _, err := dialEcho(a.NetnsPath, netip.AddrPortFrom(free, 80), 5*time.Second); !isRefused(err) {
			t.Fatalf("A -> %s: %v, want refused", free, err)
		}
	})
}

func TestInternetAccess(t *testing.T) {
	m, a, b := twoSandboxes(t, "sa", "sb")
	ctx := context.Background()
	up := newUplink(t)
	srv := serveEcho(t, up.path, up.addr)

	must(t, m.SetInternetAccess(ctx, "sa", false))
	must(t, m.SetInternetAccess(ctx, "sa", false)) // idempotent
	if got := noInetMembers(t, m); len(got) != 1 || got[0] != a.HostVeth {
		t.Fatalf("noinet set = %v, want [%s]", got, a.HostVeth)
	}
	peer, err := dialEcho(b.NetnsPath, srv, 5*time.Second)
	if err != nil {
		t.Fatalf("B -> outside %s: %v", srv, err)
	}
	if peer != up.hostAddr.String() {
		t.Fatalf("outside saw B as %s, want masqueraded %s", peer, up.hostAddr)
	}
	if _, err := dialEcho(a.NetnsPath, srv, 5*time.Second); !isRefused(err) {
		t.Fatalf("A (no internet) -> outside: %v, want refused", err)
	}
	must(t, m.SetInternetAccess(ctx, "sa", true))
	must(t, m.SetInternetAccess(ctx, "sa", true))
	if got := noInetMembers(t, m); len(got) != 0 {
		t.Fatalf("noinet set = %v, want empty", got)
	}
	if _, err := dialEcho(a.NetnsPath, srv, 5*time.Second); err != nil {
		t.Fatalf("A (internet re-enabled) -> outside: %v", err)
	}
	if err := m.SetInternetAccess(ctx, "nope", false); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("SetInternetAccess(unknown) = %v, want ErrNotAttached", err)
	}

	t.Run("unsolicited inbound refused", func(t *testing.T) {
		in := serveEcho(t, a.NetnsPath, a.Addr)
		up.routeVia(t, m.cfg.Subnet)
		if _, err := dialEcho(up.path, in, 5*time.Second); !isRefused(err) {
			t.Fatalf("outside -> A %s: %v, want refused", in, err)
		}
	})
}

func TestDetachLeavesNothing(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	a, err := m.Attach(ctx, "sa")
	must(t, err)
	must(t, m.SetInternetAccess(ctx, "sa", false))
	must(t, m.Detach(ctx, "sa"))
	assertGone(t, m, "sa", a)
	if got := noInetMembers(t, m); len(got) != 0 {
		t.Fatalf("noinet set after Detach = %v", got)
	}
	assertRegistered(t, m, a, false)
	must(t, m.Detach(ctx, "sa"))    // idempotent
	must(t, m.Detach(ctx, "never")) // unknown
	if _, ok := m.Get("sa"); ok {
		t.Fatal("Get after Detach reports attached")
	}
}

func TestAttachFailureLeavesNothing(t *testing.T) {
	requireRoot(t)
	sfx := randSuffix(t)
	// No Setup: the gateway address does not exist (the host route's source is
	// refused) nor does the table, so Attach fails after creating the netns and veth.
	m := newManagerNoSetup(t, Config{Bridge: "cbt" + sfx, Subnet: freePrefix(t, 24), Table: "cubby_t" + sfx, Prefix: "cbt" + sfx + "-"})
	_, err := m.Attach(context.Background(), "sa")
	if err == nil {
		t.Fatal("Attach without bridge succeeded")
	}
	assertGone(t, m, "sa", m.attachment("sa", netip.Addr{}))
}

func TestAdoptAndSweep(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	x, err := m.Attach(ctx, "sx")
	must(t, err)
	y, err := m.Attach(ctx, "sy")
	must(t, err)
	z, err := m.Attach(ctx, "sz")
	must(t, err)
	must(t, m.SetInternetAccess(ctx, "sy", false))
	must(t, m.SetInternetAccess(ctx, "sz", false))

	// A restarted server: same config, empty state.
	releaseClaim(m)
	m2, err := New(m.cfg, nil)
	must(t, err)
	defer m2.Close()
	must(t, m2.Setup(ctx))
	must(t, m2.Setup(ctx)) // idempotent, keeps set members
	if got := noInetMembers(t, m2); len(got) != 2 {
		t.Fatalf("noinet set after re-Setup = %v, want 2 members", got)
	}
	addrX, err := m2.Addr("sx")
	must(t, err)
	if addrX != x.Addr {
		t.Fatalf("Addr(sx) = %s, want %s", addrX, x.Addr)
	}
	must(t, m2.Adopt("sx", addrX))
	must(t, m2.Adopt("sx", addrX)) // idempotent
	must(t, m2.Adopt("sy", y.Addr))
	if err := m2.Adopt("sz", y.Addr); !errors.Is(err, ErrAlreadyAttached) {
		t.Fatalf("Adopt with a taken address = %v, want ErrAlreadyAttached", err)
	}
	if err := m2.Adopt("missing", netip.MustParseAddr("10.0.0.9")); err == nil {
		t.Fatal("Adopt of a missing netns succeeded")
	}
	must(t, m2.Sweep(ctx, map[string]bool{"sx": true, "sy": true}))
	assertGone(t, m2, "sz", z)
	if got := noInetMembers(t, m2); len(got) != 1 || got[0] != y.HostVeth {
		t.Fatalf("noinet set after Sweep = %v, want [%s]", got, y.HostVeth)
	}
	for _, id := range []string{"sx", "sy"} {
		att, ok := m2.Get(id)
		if !ok || isNetns(att.NetnsPath) != nil {
			t.Fatalf("%s lost by Sweep: %+v %v", id, att, ok)
		}
	}
	// The kept sandbox still works after adoption.
	srv := serveEcho(t, x.NetnsPath, x.Addr)
	if _, err := dialEcho("", srv, 5*time.Second); err != nil {
		t.Fatalf("host -> adopted sx: %v", err)
	}
	// A new attach never reuses an adopted address.
	w, err := m2.Attach(ctx, "sw")
	must(t, err)
	if w.Addr == x.Addr || w.Addr == y.Addr {
		t.Fatalf("Attach reused adopted address %s", w.Addr)
	}
	must(t, m2.Sweep(ctx, nil))
	for _, id := range []string{"sx", "sy", "sw"} {
		if _, err := os.Stat(m2.netnsPath(id)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("netns of %s survives Sweep(nil): %v", id, err)
		}
	}
}

func assertGone(t *testing.T, m *Manager, id string, a Attachment) {
	t.Helper()
	if _, err := os.Stat(a.NetnsPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("netns file %s still exists: %v", a.NetnsPath, err)
	}
	var nf netlink.LinkNotFoundError
	if _, err := netlink.LinkByName(a.HostVeth); !errors.As(err, &nf) {
		t.Errorf("veth %s still exists: %v", a.HostVeth, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.sbx[id]; ok {
		t.Errorf("%s still recorded", id)
	}
	for addr, owner := range m.alloc.used {
		if owner == id {
			t.Errorf("address %s still allocated to %s", addr, id)
		}
	}
}

// noInetMembers lists the host links in m's no-internet set.
func noInetMembers(t *testing.T, m *Manager) []string {
	t.Helper()
	var out []string
	for _, e := range setElements(t, m, setNoInternet) {
		out = append(out, keyIfname(e.Key))
	}
	return out
}

func setElements(t *testing.T, m *Manager, name string) []nftables.SetElement {
	t.Helper()
	c, err := nftables.New()
	must(t, err)
	set, err := c.GetSetByName(m.table(), name)
	must(t, err)
	elems, err := c.GetSetElements(set)
	must(t, err)
	return elems
}

// assertRegistered checks that a's link is (or is not) in the sets links and own.
func assertRegistered(t *testing.T, m *Manager, a Attachment, want bool) {
	t.Helper()
	for set, key := range map[string][]byte{setLinks: ifnameKey(a.HostVeth), setOwn: ownKey(a.HostVeth, a.Addr)} {
		found := false
		for _, e := range setElements(t, m, set) {
			found = found || bytes.Equal(e.Key, key)
		}
		if found != want {
			t.Errorf("%s in nft set %s: %v, want %v", a.HostVeth, set, found, want)
		}
	}
}

func TestConcurrentAttachDetach(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	const n = 8
	atts := make([]Attachment, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			var err error
			atts[i], err = m.Attach(ctx, "c"+string(rune('a'+i)))
			errs <- err
		}()
	}
	for range n {
		must(t, <-errs)
	}
	seen := map[netip.Addr]bool{}
	for _, a := range atts {
		if seen[a.Addr] {
			t.Fatalf("address %s handed out twice", a.Addr)
		}
		seen[a.Addr] = true
	}
	for i := range n {
		go func() { errs <- m.Detach(ctx, "c"+string(rune('a'+i))) }()
	}
	for range n {
		must(t, <-errs)
	}
	for i, a := range atts {
		assertGone(t, m, "c"+string(rune('a'+i)), a)
	}
}

func TestSweepRemovesVethWithoutNetnsFile(t *testing.T) {
	m := newTestManager(t)
	a, err := m.Attach(context.Background(), "sl")
	must(t, err)
	// A process (here: an fd) keeps the netns alive after its file is gone, so
	// the veth does not vanish with it; Sweep must find it by its alias.
	fd, err := unix.Open(a.NetnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	must(t, removeNetns(a.NetnsPath))
	releaseClaim(m)
	m2, err := New(m.cfg, nil)
	must(t, err)
	defer m2.Close()
	must(t, m2.Setup(context.Background()))
	must(t, m2.Sweep(context.Background(), map[string]bool{"other": true}))
	var nf netlink.LinkNotFoundError
	if _, err := netlink.LinkByName(a.HostVeth); !errors.As(err, &nf) {
		t.Fatalf("leaked veth %s survives Sweep: %v", a.HostVeth, err)
	}
}

// TestRestoreAfterAddressLoss: gVisor takes eth0's address away when it starts
// (the kernel then flushes eth0's neighbours and routes); Restore puts all of
// it back and the host reaches the sandbox again.
func TestRestoreAfterAddressLoss(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	a, err := m.Attach(ctx, "sr")
	must(t, err)
	h, err := nsHandle(a.NetnsPath)
	must(t, err)
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	must(t, err)
	must(t, h.AddrDel(eth, &netlink.Addr{IPNet: ipnet(a.Addr, 32)}))
	if n, _ := h.NeighList(eth.Attrs().Index, netlink.FAMILY_V4); len(n) != 0 {
		t.Logf("neighbours kept after address removal: %v", n)
	}
	must(t, m.Restore(ctx, "sr"))
	must(t, m.Restore(ctx, "sr")) // idempotent
	veth, err := netlink.LinkByName(a.HostVeth)
	must(t, err)
	checkSandboxEnd(t, a, veth)
	srv := serveEcho(t, a.NetnsPath, a.Addr)
	if _, err := dialEcho("", srv, 5*time.Second); err != nil {
		t.Fatalf("host -> restored sandbox: %v", err)
	}
	if err := m.Restore(ctx, "unknown"); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("Restore(unknown) = %v, want ErrNotAttached", err)
	}
}

// TestAdoptBridgedSandbox: a sandbox left running by a server that bridged
// its sandboxes (host veth a port of the bridge, eth0 with the subnet's
// prefix, no static neighbours) is taken over: Adopt makes its link routed and
// the host reaches it; spoofing from it is dropped like from any other.
func TestAdoptBridgedSandbox(t *testing.T) {
	m := newTestManager(t)
	addr := m.cfg.Subnet.Addr().Next().Next().Next()
	path, name := m.netnsPath("old"), m.vethName("old")
	ns, err := createNetns(path, nil)
	must(t, err)
	defer ns.close()
	br, err := netlink.LinkByName(m.cfg.Bridge)
	must(t, err)
	attrs := netlink.NewLinkAttrs()
	attrs.Name, attrs.MasterIndex = name, br.Attrs().Index
	must(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "eth0", PeerNamespace: netlink.NsFd(ns.fd)}))
	veth, err := netlink.LinkByName(name)
	must(t, err)
	must(t, netlink.LinkSetAlias(veth, m.aliasPrefix()+"old"))
	must(t, netlink.LinkSetUp(veth))
	eth, err := ns.nl.LinkByName("eth0")
	must(t, err)
	must(t, ns.nl.AddrAdd(eth, &netlink.Addr{IPNet: ipnet(addr, m.cfg.Subnet.Bits())}))
	must(t, ns.nl.LinkSetUp(eth))
	must(t, ns.nl.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: m.gateway.AsSlice()}))

	must(t, m.Adopt("old", addr))
	veth, err = netlink.LinkByName(name)
	must(t, err)
	if veth.Attrs().MasterIndex != 0 || veth.Attrs().RawFlags&unix.IFF_NOARP == 0 {
		t.Fatalf("adopted link still bridged or answering ARP: master %d flags %#x", veth.Attrs().MasterIndex, veth.Attrs().RawFlags)
	}
	a, ok := m.Get("old")
	if !ok {
		t.Fatal("adopted sandbox not attached")
	}
	assertRegistered(t, m, a, true)
	assertNeigh(t, "sandbox", func() ([]netlink.Neigh, error) { return ns.nl.NeighList(eth.Attrs().Index, netlink.FAMILY_V4) },
		m.gateway, veth.Attrs().HardwareAddr)
	srv := serveEcho(t, path, addr)
	if peer, err := dialEcho("", srv, 5*time.Second); err != nil || peer != m.gateway.String() {
		t.Fatalf("host -> adopted sandbox: peer %q, %v", peer, err)
	}
	gwSrv := serveEcho(t, "", m.gateway)
	if _, err := dialEcho(path, gwSrv, 5*time.Second); !isRefused(err) {
		t.Fatalf("adopted sandbox -> host: %v, want refused", err)
	}
}

// A netns made by someone else (here unshare(1), as a sandbox's user namespace
// helper would) is configured like one Attach creates; a failing maker leaves
// nothing behind.
func TestAttachWithExternalNetns(t *testing.T) {
	m := newTestManager(t)
	ctx := context.Background()
	var made string
	a, err := m.AttachWith(ctx, "sw", func(path string) error {
		made = path
		if err := os.WriteFile(path, nil, 0o444); err != nil {
			return err
		}
		if out, err := exec.Command("unshare", "--net="+path, "true").CombinedOutput(); err != nil {
			os.Remove(path)
			return fmt.Errorf("unshare: %v: %s", err, out)
		}
		return nil
	})
	must(t, err)
	if made != a.NetnsPath {
		t.Fatalf("maker called for %q, attachment at %q", made, a.NetnsPath)
	}
	veth, err := netlink.LinkByName(a.HostVeth)
	must(t, err)
	checkSandboxEnd(t, a, veth)
	must(t, m.Detach(ctx, "sw"))

	boom := errors.New("boom")
	if _, err := m.AttachWith(ctx, "sx", func(string) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("AttachWith with a failing maker: %v", err)
	}
	if _, ok := m.Get("sx"); ok {
		t.Fatal("failed attachment still registered")
	}
	if _, err := netlink.LinkByName(m.vethName("sx")); err == nil {
		t.Fatal("veth left after a failed attach")
	}
	if _, err := os.Lstat(m.netnsPath("sx")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("netns file left after a failed attach: %v", err)
	}
}
