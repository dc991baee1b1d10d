package network

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestEgressRules(t *testing.T) {
	m, a, b := twoSandboxes(t, "ea", "eb")
	ctx := context.Background()
	up := newUplink(t)
	srv := serveEcho(t, up.path, up.addr)
	deny := []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}

	must(t, m.SetEgress(ctx, "ea", EgressRules{Deny: deny, Allow: []netip.Prefix{netip.PrefixFrom(up.addr, 32)}}))
	if _, err := dialEcho(a.NetnsPath, srv, 5*time.Second); err != nil {
		t.Fatalf("allowed address beats deny all: %v", err)
	}
	must(t, m.SetEgress(ctx, "ea", EgressRules{Deny: deny, Allow: []netip.Prefix{
		netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("192.0.2.128/25"), // overlapping: merged
		m.cfg.Subnet, // a policy never opens sandbox-to-sandbox traffic
	}}))
	if _, err := dialEcho(a.NetnsPath, srv, 5*time.Second); !isRefused(err) {
		t.Fatalf("denied address: %v, want refused at once", err)
	}
	inB := serveEcho(t, b.NetnsPath, b.Addr)
	if _, err := dialEcho(a.NetnsPath, inB, 3*time.Second); !isRefused(err) {
		t.Fatalf("A -> B with B's subnet allowed: %v, want refused", err)
	}
	if _, err := dialEcho(b.NetnsPath, srv, 5*time.Second); err != nil {
		t.Fatalf("B has no policy: %v", err)
	}
	// The table is rebuilt at every server start: policies must survive it.
	must(t, m.Setup(ctx))
	if _, err := dialEcho(a.NetnsPath, srv, 5*time.Second); !isRefused(err) {
		t.Fatalf("after Setup the deny must hold: %v", err)
	}
	must(t, m.SetEgress(ctx, "ea", EgressRules{}))
	if _, err := dialEcho(a.NetnsPath, srv, 5*time.Second); err != nil {
		t.Fatalf("policy removed: %v", err)
	}
	if err := m.SetEgress(ctx, "nope", EgressRules{}); !errors.Is(err, ErrNotAttached) {
		t.Fatalf("SetEgress(unknown) = %v", err)
	}
	must(t, m.SetEgress(ctx, "ea", EgressRules{Deny: deny}))
	must(t, m.Detach(ctx, "ea"))
	for _, set := range []string{setAllow, setDeny, setSteer} {
		if n := len(setElements(t, m, set)); n != 0 {
			t.Fatalf("detached sandbox left %d elements in %s", n, set)
		}
	}
}

func TestEgressCutsLiveConnection(t *testing.T) {
	m, a, _ := twoSandboxes(t, "la", "lb")
	ctx := context.Background()
	up := newUplink(t)
	var ln net.Listener
	must(t, inNetns(up.path, func() (err error) { ln, err = net.Listen("tcp4", netip.AddrPortFrom(up.addr, 0).String()); return err }))
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			buf := make([]byte, 8)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}
	}()
	var c net.Conn
	must(t, inNetns(a.NetnsPath, func() (err error) { c, err = net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second); return err }))
	defer c.Close()
	if _, err := c.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	must(t, m.SetEgress(ctx, "la", EgressRules{Deny: []netip.Prefix{netip.PrefixFrom(up.addr, 32)}}))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.Write([]byte("after")); err != nil {
			if !errors.Is(err, unix.ECONNRESET) && !errors.Is(err, unix.EPIPE) {
				t.Fatalf("write after deny: %v, want a reset", err)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("a connection to a newly denied address kept working")
}

func TestEgressSteering(t *testing.T) {
	m, a, b := twoSandboxes(t, "sta", "stb")
	ctx := context.Background()
	up := newUplink(t)
	var proxy net.Listener
	var dns net.PacketConn
	var err error
	proxy, err = net.Listen("tcp4", netip.AddrPortFrom(m.Gateway(), 0).String())
	must(t, err)
	defer proxy.Close()
	dns, err = net.ListenPacket("udp4", netip.AddrPortFrom(m.Gateway(), 0).String())
	must(t, err)
	defer dns.Close()
	ports := EgressPorts{Proxy: uint16(proxy.Addr().(*net.TCPAddr).Port), DNS: uint16(dns.LocalAddr().(*net.UDPAddr).Port)}
	if err := m.SetEgress(ctx, "sta", EgressRules{Steer: true}); err == nil {
		t.Fatal("steering without ports must fail")
	}
	must(t, m.SetEgressPorts(ctx, ports))
	must(t, m.SetEgress(ctx, "sta", EgressRules{Steer: true, Deny: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}))
	web := serveEchoAt(t, up.path, netip.AddrPortFrom(up.addr, 80))
	got := make(chan string, 4)
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			got <- c.RemoteAddr().String()
			c.Close()
		}
	}()
	go func() { _, _ = dialEcho(a.NetnsPath, web, 3*time.Second) }()
	select {
	case from := <-got:
		if ap := netip.MustParseAddrPort(from); ap.Addr() != a.Addr {
			t.Fatalf("proxy got a connection from %s, want %s", from, a.Addr)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("A's port-80 connection did not reach the proxy")
	}
	if peer, err := dialEcho(b.NetnsPath, web, 5*time.Second); err != nil || peer != up.hostAddr.String() {
		t.Fatalf("B (not steered) -> web: %q %v", peer, err)
	}
	direct := netip.AddrPortFrom(m.Gateway(), ports.Proxy)
	for _, ns := range []string{a.NetnsPath, b.NetnsPath} {
		if _, err := dialEcho(ns, direct, 3*time.Second); !isRefused(err) {
			t.Fatalf("a sandbox connecting to the proxy port itself: %v, want refused", err)
		}
	}
	checkDNSSteered(t, a, dns)
}

// checkDNSSteered sends a query from a to 192.0.2.53:53 and answers it on the
// proxy's DNS socket: the answer must come back from the address asked.
func checkDNSSteered(t *testing.T, a Attachment, dns net.PacketConn) {
	go func() {
		buf := make([]byte, 512)
		n, from, err := dns.ReadFrom(buf)
		if err == nil {
			_, _ = dns.WriteTo(append([]byte("re:"), buf[:n]...), from)
		}
	}()
	var c net.Conn
	must(t, inNetns(a.NetnsPath, func() (err error) { c, err = net.Dial("udp4", "192.0.2.53:53"); return err }))
	defer c.Close()
	_, _ = c.Write([]byte("q"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "re:q" {
		t.Fatalf("steered DNS answer: %q %v", buf[:n], err)
	}
}

func TestEgressNetwork(t *testing.T) {
	m, a, _ := twoSandboxes(t, "ena", "enb")
	ctx := context.Background()
	up := newUplink(t)
	srv := serveEcho(t, up.path, up.addr)
	eg, err := m.AttachEgress(ctx)
	must(t, err)
	if eg2, err := m.AttachEgress(ctx); err != nil || eg2.NetnsPath != eg.NetnsPath {
		t.Fatalf("AttachEgress again: %+v %v", eg2, err)
	}
	if peer, err := dialEcho(eg.NetnsPath, srv, 5*time.Second); err != nil || peer != up.hostAddr.String() {
		t.Fatalf("egress network -> outside: %q %v", peer, err)
	}
	inA := serveEcho(t, a.NetnsPath, a.Addr)
	if _, err := dialEcho(eg.NetnsPath, inA, 3*time.Second); !isRefused(err) {
		t.Fatalf("egress network -> sandbox: %v, want refused", err)
	}
	host := serveEcho(t, "", m.Gateway())
	if _, err := dialEcho(eg.NetnsPath, host, 3*time.Second); !isRefused(err) {
		t.Fatalf("egress network -> host service: %v, want refused", err)
	}
	must(t, m.Sweep(ctx, map[string]bool{"ena": true, "enb": true}))
	if _, ok := m.Get(EgressID); !ok {
		t.Fatal("Sweep removed the egress network")
	}
}
