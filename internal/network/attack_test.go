package network

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/linkdial"
	"github.com/cubby-dev/cubby/internal/testenv/testnetns"
)

// The tests in this file play a sandbox taken over by an attacker who kept
// every capability: the test process is host root inside the attacker's netns,
// so raw and packet sockets, address and MAC changes all work there. What must
// hold is what the host does with whatever the attacker sends.

// Ethernet and ARP constants (IEEE 802.3, RFC 826).
const (
	ethPIPv4 = 0x0800
	ethPARP  = 0x0806
	ethPIPv6 = 0x86dd
	arpReq   = 1
	arpReply = 2
)

// packetSock is an AF_PACKET socket bound to one interface of a netns; it
// keeps working from any thread once opened.
type packetSock struct {
	fd  int
	idx int
	mac net.HardwareAddr
}

// openPacket opens a packet socket on ifname inside the netns at nsPath.
func openPacket(tb testing.TB, nsPath, ifname string) packetSock {
	tb.Helper()
	var p packetSock
	must(tb, inNetns(nsPath, func() error {
		l, err := netlink.LinkByName(ifname)
		if err != nil {
			return err
		}
		p.idx, p.mac = l.Attrs().Index, l.Attrs().HardwareAddr
		p.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(p.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: p.idx})
	}))
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	must(tb, unix.SetsockoptTimeval(p.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv))
	tb.Cleanup(func() { unix.Close(p.fd) })
	return p
}

func (p packetSock) send(tb testing.TB, frame []byte) {
	tb.Helper()
	must(tb, unix.Sendto(p.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: p.idx}))
}

// sniff counts, until stop is closed, received frames for which match is true.
func (p packetSock) sniff(stop <-chan struct{}, match func(frame []byte) bool) *atomic.Int64 {
	var n atomic.Int64
	go func() {
		buf := make([]byte, 65536)
		for {
			select {
			case <-stop:
				return
			default:
			}
			k, from, err := unix.Recvfrom(p.fd, buf, 0)
			if ll, ok := from.(*unix.SockaddrLinklayer); err == nil && ok && ll.Pkttype != unix.PACKET_OUTGOING && match(buf[:k]) {
				n.Add(1)
			}
		}
	}()
	return &n
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

var broadcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// arpFrame builds an Ethernet ARP frame for IPv4 over Ethernet.
func arpFrame(dst, src net.HardwareAddr, op uint16, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	b := append(append([]byte{}, dst...), src...)
	b = binary.BigEndian.AppendUint16(b, ethPARP)
	b = append(b, 0, 1, 8, 0, 6, 4) // htype Ethernet, ptype IPv4, hlen, plen
	b = binary.BigEndian.AppendUint16(b, op)
	b = append(append(b, sha...), spa.AsSlice()...)
	return append(append(b, tha...), tpa.AsSlice()...)
}

// ipv4Dst reports whether frame is an IPv4 packet to dst.
func ipv4Dst(frame []byte, dst netip.Addr) bool {
	return len(frame) >= 34 && binary.BigEndian.Uint16(frame[12:]) == ethPIPv4 &&
		netip.AddrFrom4([4]byte(frame[30:34])) == dst
}

// TestForgedARPDoesNotRedirect: the attacker A claims, with gratuitous ARP and
// unsolicited replies to the gateway, the neighbour B's address and the
// gateway's, and even puts B's address on its own eth0. The host's traffic to
// B still reaches B (which sees the gateway as its peer), none of it reaches
// A, and the host's neighbour entry for B is unchanged.
func TestForgedARPDoesNotRedirect(t *testing.T) {
	m, a, b := twoSandboxes(t, "atk", "vic")
	srv := serveEcho(t, b.NetnsPath, b.Addr)
	if _, err := dialEcho("", srv, 5*time.Second); err != nil {
		t.Fatalf("sanity: host -> B before the attack: %v", err)
	}
	atk := openPacket(t, a.NetnsPath, "eth0")
	stop := make(chan struct{})
	defer close(stop)
	stolen := atk.sniff(stop, func(f []byte) bool { return ipv4Dst(f, b.Addr) })
	gwMAC := gatewayMAC(m.cfg.Bridge)
	poison := func() {
		for _, claim := range []netip.Addr{b.Addr, a.Gateway} {
			atk.send(t, arpFrame(broadcastMAC, atk.mac, arpReq, atk.mac, claim, broadcastMAC, claim))
			atk.send(t, arpFrame(broadcastMAC, atk.mac, arpReply, atk.mac, claim, broadcastMAC, claim))
			atk.send(t, arpFrame(gwMAC, atk.mac, arpReply, atk.mac, claim, gwMAC, a.Gateway))
		}
	}
	h, err := nsHandle(a.NetnsPath)
	must(t, err)
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	must(t, err)
	must(t, h.AddrAdd(eth, &netlink.Addr{IPNet: ipnet(b.Addr, 32)}))
	for range 20 {
		poison()
		peer, err := dialEcho("", srv, 2*time.Second)
		if err != nil || peer != a.Gateway.String() {
			t.Fatalf("host -> B during the attack: peer %q, %v; want B answering the gateway %s", peer, err, a.Gateway)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := stolen.Load(); n != 0 {
		t.Fatalf("the attacker received %d packets addressed to B", n)
	}
	assertHostNeigh(t, b)
}

// TestBoundDialStaysOnItsLink: a host connection bound to A's link but
// addressed to B (a stale address) never reaches anyone: not B (wrong link),
// not A (the link carries only A's address).
func TestBoundDialStaysOnItsLink(t *testing.T) {
	m, a, b := twoSandboxes(t, "sa", "sb")
	ctx := context.Background()
	srv := serveEcho(t, b.NetnsPath, b.Addr)
	atk := openPacket(t, a.NetnsPath, "eth0")
	stop := make(chan struct{})
	defer close(stop)
	seen := atk.sniff(stop, func(f []byte) bool { return ipv4Dst(f, b.Addr) })
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c, err := linkdial.DialContext(dctx, a.HostVeth, "tcp4", srv.String()); err == nil {
		c.Close()
		t.Fatal("a dial bound to A's link connected to B's address")
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("A received %d packets of a connection meant for B", n)
	}
	c, err := linkdial.DialContext(ctx, b.HostVeth, "tcp4", srv.String())
	if err != nil {
		t.Fatalf("dial bound to B's own link: %v", err)
	}
	c.Close()
	if c, err := linkdial.DialContext(ctx, m.HostVeth("gone"), "tcp4", srv.String()); !errors.Is(err, unix.ENODEV) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial bound to a missing link: %v, want ENODEV", err)
	}
}

// rawIPSock opens a raw IPv4 socket (IP_HDRINCL) inside the netns at nsPath.
func rawIPSock(tb testing.TB, nsPath string) int {
	tb.Helper()
	var fd int
	must(tb, inNetns(nsPath, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		return err
	}))
	tb.Cleanup(func() { unix.Close(fd) })
	return fd
}

// sendUDPFrom sends one UDP datagram with an arbitrary IPv4 source through
// the raw socket fd (the kernel fills the IP checksum; UDP checksum 0 = none).
func sendUDPFrom(tb testing.TB, fd int, src netip.Addr, dst netip.AddrPort, payload string) {
	tb.Helper()
	n := 28 + len(payload)
	b := []byte{0x45, 0, byte(n >> 8), byte(n), 0, 0, 0x40, 0, 64, unix.IPPROTO_UDP, 0, 0}
	b = append(append(b, src.AsSlice()...), dst.Addr().AsSlice()...)
	b = binary.BigEndian.AppendUint16(b, 40000)
	b = binary.BigEndian.AppendUint16(b, dst.Port())
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(payload)))
	b = append(b, 0, 0)
	b = append(b, payload...)
	must(tb, unix.Sendto(fd, b, 0, &unix.SockaddrInet4{Addr: dst.Addr().As4()}))
}

// TestForgedSourcesDoNotLeave: the attacker sends UDP to the "internet" (a
// netns behind the host's masquerade, rp_filter off so it accepts anything)
// with its own source, the neighbour's, the gateway's and a public one. Only
// its own leaves, masqueraded; with its internet access off nothing leaves,
// not even under the address of a neighbour whose access is on.
func TestForgedSourcesDoNotLeave(t *testing.T) {
	m, a, b := twoSandboxes(t, "atk", "nbr")
	ctx := context.Background()
	up := newUplink(t)
	must(t, inNetns(up.path, func() error {
		return writeSysctls([]sysctl{{Path: "ipv4/conf/all/rp_filter", Value: "0"}, {Path: "ipv4/conf/up0/rp_filter", Value: "0"}}, "")
	}))
	sink := testnetns.ListenUDP(t, up.path, up.addr)
	fd := rawIPSock(t, a.NetnsPath)
	public := netip.MustParseAddr("198.51.100.7")
	sources := map[string]netip.Addr{"own": a.Addr, "neighbour": b.Addr, "gateway": a.Gateway, "public": public}
	for name, src := range sources {
		sendUDPFrom(t, fd, src, sink.Addr, name)
	}
	got := sink.Await("own", 10*time.Second, 500*time.Millisecond)
	if got["own"] != up.hostAddr.String() {
		t.Errorf("legitimate egress arrived as %q, want masqueraded to %s (all: %v)", got["own"], up.hostAddr, got)
	}
	for _, name := range []string{"neighbour", "gateway", "public"} {
		if from, ok := got[name]; ok {
			t.Errorf("datagram with a forged %s source left the host (seen from %s)", name, from)
		}
	}
	must(t, m.SetInternetAccess(ctx, "atk", false))
	for name, src := range sources {
		sendUDPFrom(t, fd, src, sink.Addr, "noinet-"+name)
	}
	sendUDPFrom(t, rawIPSock(t, b.NetnsPath), b.Addr, sink.Addr, "marker") // B's access is on
	if got := sink.Await("marker", 10*time.Second, 500*time.Millisecond); len(got) != 1 {
		t.Errorf("want only B's marker; a sandbox without internet access got datagrams out: %v", got)
	}
}

// TestNoIPv6FromSandbox: IPv6 sent by the attacker (an echo request to every
// node of its link) gets no answer from the host, which has no IPv6 on the link.
func TestNoIPv6FromSandbox(t *testing.T) {
	m := newTestManager(t)
	a, err := m.Attach(context.Background(), "atk")
	must(t, err)
	atk := openPacket(t, a.NetnsPath, "eth0")
	stop := make(chan struct{})
	defer close(stop)
	answers := atk.sniff(stop, func(f []byte) bool {
		return len(f) >= 14 && binary.BigEndian.Uint16(f[12:]) == ethPIPv6
	})
	src := netip.MustParseAddr("fe80::1")
	for range 5 {
		atk.send(t, icmp6EchoFrame(atk.mac, src, netip.MustParseAddr("ff02::1")))
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	if n := answers.Load(); n != 0 {
		t.Fatalf("the host answered %d IPv6 frames from the sandbox", n)
	}
}

// icmp6EchoFrame builds an Ethernet frame with an ICMPv6 echo request from src
// to the multicast group dst (RFC 4443, checksum over the RFC 8200 pseudo-header).
func icmp6EchoFrame(srcMAC net.HardwareAddr, src, dst netip.Addr) []byte {
	d := dst.As16()
	icmp := []byte{128, 0, 0, 0, 0x12, 0x34, 0, 1, 'c', 'u', 'b', 'b', 'y'}
	pseudo := append(append(src.AsSlice(), dst.AsSlice()...), 0, 0, 0, byte(len(icmp)), 0, 0, 0, 58)
	binary.BigEndian.PutUint16(icmp[2:], checksum(append(pseudo, icmp...)))
	b := append([]byte{0x33, 0x33, d[12], d[13], d[14], d[15]}, srcMAC...)
	b = binary.BigEndian.AppendUint16(b, ethPIPv6)
	b = append(b, 0x60, 0, 0, 0, 0, byte(len(icmp)), 58, 255)
	b = append(append(b, src.AsSlice()...), dst.AsSlice()...)
	return append(b, icmp...)
}

// checksum is the Internet checksum (RFC 1071).
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
