package testinternet

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/cubby-dev/cubby/internal/testenv/testnetns"
)

// Host names of the test internet and the last byte of their addresses.
var hostBytes = map[string]byte{
	"allowed.test": 2, "denied.test": 3, "echo.test": 4, "*.wild.test": 5, "other.test": 7,
}

// Special addresses of the test internet (last byte).
const (
	hostEnd   = 1  // the host's end of the link
	socksByte = 6  // SOCKS5 proxy, port SOCKSPort
	dnsByte   = 53 // DNS server, port 53
	// SOCKSPort is the port of the SOCKS5 proxy.
	SOCKSPort = 1080
	// RawPort is a plain TCP echo on every address (not HTTP).
	RawPort = 7
)

// Internet is a network namespace standing in for the internet: one /24 of
// 198.18.0.0/15 (RFC 2544 benchmarking space) routed from the host over a
// veth, with an HTTP (80) and HTTPS (443) echo server on the address of each
// test name, a raw TCP echo on RawPort, an authoritative DNS server for the
// names and a SOCKS5 proxy (user "cubby", password "socks-pw").
type Internet struct {
	Name    string // netns name (under /run/netns) and host link name
	Prefix  netip.Prefix
	Names   Names
	DNS     netip.AddrPort
	SOCKS   netip.AddrPort
	CA      *CA
	CAFile  string // the test CA's certificate (PEM), for --egress-upstream-ca
	Echo    *Echo  // the server of echo.test
	Resolve *DNSServer
	Proxy   *SOCKS5

	closers []func()
}

// Addr returns the address of test name (e.g. "allowed.test"; "a.wild.test" works).
func (n *Internet) Addr(name string) netip.Addr {
	a, _ := n.Resolve.lookup(name)
	return a
}

// NewInternet creates the namespace, link, route and servers; dir receives
// CAFile. Close removes everything.
func NewInternet(dir string) (n *Internet, err error) {
	sfx := make([]byte, 3)
	_, _ = rand.Read(sfx)
	n = &Internet{Name: "cbinet" + hex.EncodeToString(sfx), Names: Names{}, Echo: &Echo{}}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.Prefix, err = freePrefix(); err != nil {
		return nil, err
	}
	base := n.Prefix.Addr().As4()
	at := func(b byte) netip.Addr { a := base; a[3] = b; return netip.AddrFrom4(a) }
	for name, b := range hostBytes {
		n.Names[name] = at(b)
	}
	n.DNS, n.SOCKS = netip.AddrPortFrom(at(dnsByte), 53), netip.AddrPortFrom(at(socksByte), SOCKSPort)
	if err := n.link(at); err != nil {
		return nil, err
	}
	if n.CA, err = NewCA(); err != nil {
		return nil, err
	}
	n.CAFile = filepath.Join(dir, "test-internet-ca.pem")
	if err := os.WriteFile(n.CAFile, n.CA.PEM, 0o644); err != nil {
		return nil, err
	}
	return n, n.serve(at)
}

// freePrefix picks a random /24 of 198.18.0.0/15 no host route overlaps.
func freePrefix() (netip.Prefix, error) {
	for range 64 {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18 + b[0]%2, b[1], 0}), 24)
		routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
		if err != nil {
			return netip.Prefix{}, err
		}
		used := false
		for _, r := range routes {
			if r.Dst != nil {
				a, _ := netip.AddrFromSlice(r.Dst.IP.To4())
				ones, _ := r.Dst.Mask.Size()
				used = used || (ones > 0 && netip.PrefixFrom(a, ones).Overlaps(p))
			}
		}
		if !used {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("no free /24 in 198.18.0.0/15")
}

// link creates the netns and its veth: host end .1/24, the names' addresses
// and the DNS and SOCKS ones inside.
func (n *Internet) link(at func(byte) netip.Addr) error {
	ns, err := newNamedNetns(n.Name)
	if err != nil {
		return err
	}
	defer ns.Close()
	n.closers = append(n.closers, func() { _ = netns.DeleteNamed(n.Name) })
	attrs := netlink.NewLinkAttrs()
	attrs.Name = n.Name
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: "inet0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("test internet veth: %w", err)
	}
	n.closers = append(n.closers, func() { _ = netlink.LinkDel(veth) })
	hostAddr := &netlink.Addr{IPNet: &net.IPNet{IP: at(hostEnd).AsSlice(), Mask: net.CIDRMask(24, 32)}}
	if err := netlink.AddrAdd(veth, hostAddr); err != nil {
		return err
	}
	if err := netlink.LinkSetUp(veth); err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	peer, err := h.LinkByName("inet0")
	if err != nil {
		return err
	}
	for _, b := range []byte{2, 3, 4, 5, socksByte, 7, dnsByte} {
		if err := h.AddrAdd(peer, &netlink.Addr{IPNet: &net.IPNet{IP: at(b).AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
			return err
		}
	}
	lo, _ := h.LinkByName("lo")
	for _, l := range []netlink.Link{peer, lo} {
		if err := h.LinkSetUp(l); err != nil {
			return err
		}
	}
	return waitUp(n.Name)
}

func waitUp(ifname string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join("/sys/class/net", ifname, "operstate")); err == nil && string(b) == "up\n" {
			return nil
		}
	}
	return fmt.Errorf("%s did not come up", ifname)
}

// newNamedNetns creates a netns bind-mounted at /run/netns/name without
// moving the caller into it.
func newNamedNetns(name string) (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return 0, err
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		return 0, fmt.Errorf("create netns %s: %w", name, err)
	}
	if err := netns.Set(orig); err != nil {
		panic("cannot return to the original netns: " + err.Error())
	}
	return ns, nil
}

// serve starts the servers inside the netns.
func (n *Internet) serve(at func(byte) netip.Addr) error {
	cert, err := n.CA.ServerCert("allowed.test", "denied.test", "echo.test", "other.test", "*.wild.test")
	if err != nil {
		return err
	}
	n.Resolve = &DNSServer{Names: n.Names}
	n.Proxy = &SOCKS5{User: "cubby", Password: "socks-pw", Dial: n.socksDial}
	path := filepath.Join("/run/netns", n.Name)
	return testnetns.InNetns(path, func() error {
		for _, b := range []byte{2, 3, 4, 5, 7} {
			h := &Echo{Name: at(b).String()}
			if b == 4 {
				h = n.Echo
				h.Name = at(b).String()
			}
			if err := n.serveHTTP(at(b), h, cert); err != nil {
				return err
			}
		}
		pc, err := net.ListenPacket("udp4", n.DNS.String())
		if err != nil {
			return err
		}
		n.closers = append(n.closers, func() { pc.Close() })
		go n.Resolve.Serve(pc)
		ln, err := net.Listen("tcp4", n.SOCKS.String())
		if err != nil {
			return err
		}
		n.closers = append(n.closers, func() { ln.Close() })
		go n.Proxy.Serve(ln)
		return nil
	})
}

// serveHTTP serves h on addr:80 and addr:443 (TLS with cert) and a raw echo
// on addr:RawPort. Called inside the netns.
func (n *Internet) serveHTTP(addr netip.Addr, h http.Handler, cert tls.Certificate) error {
	plain, err := net.Listen("tcp4", netip.AddrPortFrom(addr, 80).String())
	if err != nil {
		return err
	}
	secure, err := net.Listen("tcp4", netip.AddrPortFrom(addr, 443).String())
	if err != nil {
		plain.Close()
		return err
	}
	raw, err := net.Listen("tcp4", netip.AddrPortFrom(addr, RawPort).String())
	if err != nil {
		plain.Close()
		secure.Close()
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	n.closers = append(n.closers, func() { srv.Close(); raw.Close() })
	go func() { _ = srv.Serve(plain) }()
	go func() { _ = srv.Serve(tls.NewListener(secure, &tls.Config{Certificates: []tls.Certificate{cert}})) }()
	go rawEcho(raw, addr)
	return nil
}

// rawEcho answers each connection with "raw <addr>\n" and echoes its first line.
func rawEcho(ln net.Listener, addr netip.Addr) {
	serveConns(ln, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "raw %s\n", addr)
		buf := make([]byte, 256)
		if k, err := c.Read(buf); err == nil {
			_, _ = c.Write(buf[:k])
		}
	})
}

// socksDial resolves test names itself (remote DNS) and dials.
func (n *Internet) socksDial(network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	if a := n.Addr(host); a.IsValid() {
		address = net.JoinHostPort(a.String(), port)
	}
	return net.DialTimeout(network, address, 5*time.Second)
}

// Close stops the servers and removes the link and the netns.
func (n *Internet) Close() {
	for i := len(n.closers) - 1; i >= 0; i-- {
		n.closers[i]()
	}
	n.closers = nil
}
