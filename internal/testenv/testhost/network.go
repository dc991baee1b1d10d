package testhost

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
// Errors: the kernel refuses a listener.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// FreeSubnet returns a random 10.x.y.0/24 (x in 100..249) that overlaps no
// IPv4 route in the main table and no address on a host interface, so
// servers running side by side on this machine do not clash. Errors: the
// routes cannot be read, or 1000 random picks all clash.
func FreeSubnet() (string, error) {
	used, err := usedPrefixes()
	if err != nil {
		return "", err
	}
	for range 1000 {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		p := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 100+int(b[0])%150, b[1]))
		if !overlapsAny(p, used) {
			return p.String(), nil
		}
	}
	return "", errors.New("no free 10.x.y.0/24 subnet")
}

// usedPrefixes lists the destinations of the host's IPv4 routes (other than
// the default route) and the networks of its interface addresses.
func usedPrefixes() ([]netip.Prefix, error) {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list routes: %w", err)
	}
	var used []netip.Prefix
	for _, r := range routes {
		if r.Dst == nil {
			continue // default route (older netlink)
		}
		if p, err := netip.ParsePrefix(r.Dst.String()); err == nil && p.Bits() > 0 {
			used = append(used, p.Masked()) // 0.0.0.0/0 is the default route
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("interface addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			used = append(used, p.Masked())
		}
	}
	return used, nil
}

func overlapsAny(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if u.Overlaps(p) {
			return true
		}
	}
	return false
}
