package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// sandboxIfname is the name of the sandbox end of the veth pair inside its netns.
const sandboxIfname = "eth0"

// procNet is the root of the per-netns network sysctls (proc(5), /proc/sys/net).
const procNet = "/proc/sys/net"

// sysctl is one /proc/sys/net setting; Path is relative to procNet and may hold
// one %s for an interface name.
type sysctl struct {
	Path, Value string
	// Optional settings are skipped when the file does not exist (IPv6 not
	// built into the kernel).
	Optional bool
}

// hostLinkSysctls are set on every host link before it comes up: no IPv6 (no
// link-local address, IPv6 frames dropped on receipt), strict reverse-path
// filtering (RFC 3704; the kernel applies max(all, link), so "all"=2 would
// make it loose: the nftables source check does not depend on it), and ICMP
// redirects neither accepted from the sandbox nor sent to it.
var hostLinkSysctls = []sysctl{
	{Path: "ipv6/conf/%s/disable_ipv6", Value: "1", Optional: true},
	{Path: "ipv4/conf/%s/rp_filter", Value: "1"},
	{Path: "ipv4/conf/%s/accept_redirects", Value: "0"},
	{Path: "ipv4/conf/%s/send_redirects", Value: "0"},
}

// sandboxNetnsSysctls are set in every new sandbox netns before its eth0
// exists: IPv6 off for interfaces created later (lo keeps ::1), and ICMP
// datagram ("ping") sockets allowed for every gid, so ping works without
// CAP_NET_RAW (the range covers every host gid, also those of user namespaces).
var sandboxNetnsSysctls = []sysctl{
	{Path: "ipv6/conf/default/disable_ipv6", Value: "1", Optional: true},
	{Path: "ipv4/ping_group_range", Value: "0\t2147483647"},
}

// writeSysctls writes each setting (with ifname substituted) in the calling
// thread's network namespace.
func writeSysctls(list []sysctl, ifname string) error {
	for _, s := range list {
		rel := s.Path
		if ifname != "" {
			rel = fmt.Sprintf(rel, ifname)
		}
		path := filepath.Join(procNet, rel)
		err := os.WriteFile(path, []byte(s.Value), 0)
		if err != nil && !(s.Optional && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("set %s: %w", path, err)
		}
	}
	return nil
}

// addVeth creates the veth pair: the host end name, down, with the gateway MAC
// and this Manager's alias (the kernel ignores IFLA_IFALIAS on creation, so it
// is set after), and its peer eth0 directly in the netns nsfd.
func (m *Manager) addVeth(id, name string, nsfd int) (netlink.Link, error) {
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	attrs.HardwareAddr = gatewayMAC(m.cfg.Bridge)
	veth := &netlink.Veth{LinkAttrs: attrs, PeerName: sandboxIfname, PeerNamespace: netlink.NsFd(nsfd)}
	if err := m.host.LinkAdd(veth); err != nil {
		return nil, fmt.Errorf("create veth %s: %w", name, err)
	}
	if err := m.host.LinkSetAlias(veth, m.aliasPrefix()+id); err != nil {
		return nil, fmt.Errorf("set alias of veth %s: %w", name, err)
	}
	return veth, nil
}

// configureHostEnd makes link the routed host end of the sandbox at addr whose
// eth0 has MAC peer: off any bridge (an older server's port), hostLinkSysctls,
// IFF_NOARP, up, a permanent neighbour entry for addr and the route to addr/32
// over link with the gateway as source. Idempotent.
func (m *Manager) configureHostEnd(link netlink.Link, addr netip.Addr, peer net.HardwareAddr) error {
	name := link.Attrs().Name
	if link.Attrs().MasterIndex != 0 {
		if err := m.host.LinkSetNoMaster(link); err != nil {
			return fmt.Errorf("release %s from its bridge: %w", name, err)
		}
	}
	if err := writeSysctls(hostLinkSysctls, name); err != nil {
		return err
	}
	if err := m.host.LinkSetARPOff(link); err != nil {
		return fmt.Errorf("turn off ARP on %s: %w", name, err)
	}
	if err := m.host.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring up %s: %w", name, err)
	}
	idx := link.Attrs().Index
	if err := m.host.NeighSet(permanentNeigh(idx, addr, peer)); err != nil {
		return fmt.Errorf("neighbour %s on %s: %w", addr, name, err)
	}
	route := &netlink.Route{LinkIndex: idx, Dst: ipnet(addr, 32), Src: m.gateway.AsSlice(), Scope: netlink.SCOPE_LINK}
	if err := m.host.RouteReplace(route); err != nil {
		return fmt.Errorf("route %s/32 via %s: %w", addr, name, err)
	}
	return nil
}

// configureSandboxEnd configures the netns side through h: lo up; eth0 with
// addr/32, up, a link route to the gateway, the default route via it and a
// permanent neighbour entry mapping the gateway to gwMAC (the host link's MAC:
// the host never answers ARP). Present settings are kept. It returns eth0's MAC.
func (m *Manager) configureSandboxEnd(h *netlink.Handle, addr netip.Addr, gwMAC net.HardwareAddr) (net.HardwareAddr, error) {
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		return nil, fmt.Errorf("bring up lo in netns: %w", err)
	}
	eth, err := h.LinkByName(sandboxIfname)
	if err != nil {
		return nil, fmt.Errorf("find %s in netns: %w", sandboxIfname, err)
	}
	if err := h.AddrAdd(eth, &netlink.Addr{IPNet: ipnet(addr, 32)}); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("assign %s to %s: %w", addr, sandboxIfname, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return nil, fmt.Errorf("bring up %s: %w", sandboxIfname, err)
	}
	idx := eth.Attrs().Index
	if err := h.NeighSet(permanentNeigh(idx, m.gateway, gwMAC)); err != nil {
		return nil, fmt.Errorf("gateway neighbour in netns: %w", err)
	}
	for _, r := range []*netlink.Route{
		{LinkIndex: idx, Dst: ipnet(m.gateway, 32), Scope: netlink.SCOPE_LINK},
		{LinkIndex: idx, Gw: m.gateway.AsSlice()},
	} {
		if err := h.RouteAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("route %v in netns: %w", r, err)
		}
	}
	return eth.Attrs().HardwareAddr, nil
}

// permanentNeigh is a static (NUD_PERMANENT) IPv4 neighbour entry: never
// probed, never replaced by ARP.
func permanentNeigh(linkIndex int, addr netip.Addr, mac net.HardwareAddr) *netlink.Neigh {
	return &netlink.Neigh{LinkIndex: linkIndex, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: addr.AsSlice(), HardwareAddr: mac}
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}
