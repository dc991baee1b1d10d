package local

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// sandboxIfname is the sandbox end of its veth pair inside the netns (see
// internal/network.Attach).
const sandboxIfname = "eth0"

// ensureNetns checks that the sandbox's network namespace (kept while it is paused)
// still routes: lo and eth0 up, eth0 holding the sandbox address and a default
// route via the bridge. gVisor's netstack takes eth0's address and routes away when
// it starts (shared/research/isolation.md §4), so they are put back before a
// restore or restart. Present settings are left alone.
func (b *Backend) ensureNetns(s *sandbox) error {
	att, ok := b.net.Get(s.ID)
	if !ok {
		return fmt.Errorf("network of %s is not attached", s.ID)
	}
	ns, err := netns.GetFromPath(att.NetnsPath)
	if err != nil {
		return fmt.Errorf("open netns %s: %w", att.NetnsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in netns of %s: %w", s.ID, err)
	}
	defer h.Close()
	if err := configureEth0(h, att.Addr.AsSlice(), b.net.Config().Subnet.Bits(), att.Gateway.AsSlice()); err != nil {
		return fmt.Errorf("configure netns of %s: %w", s.ID, err)
	}
	return nil
}

// configureEth0 brings lo and eth0 up and adds the address and default route when
// missing.
func configureEth0(h *netlink.Handle, ip net.IP, bits int, gw net.IP) error {
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	eth, err := h.LinkByName(sandboxIfname)
	if err != nil {
		return fmt.Errorf("find %s: %w", sandboxIfname, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, 32)}}
	if err := h.AddrAdd(eth, addr); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add address %s: %w", addr, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("set %s up: %w", sandboxIfname, err)
	}
	route := &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw}
	if err := h.RouteAdd(route); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add default route via %s: %w", gw, err)
	}
	return nil
}

// ensureNetwork makes sure a stopped sandbox about to start again has a working
// network: its kept netns is checked (ensureNetns), and when the netns file or its
// veth is gone (removed by a sweep, or lost across a host reboot) the network is
// rebuilt with network.Attach. The address may then change: s.Addr and the
// sandbox's /etc/hosts follow. The bundle needs no change (the netns path is
// derived from the ID).
func (b *Backend) ensureNetwork(ctx context.Context, s *sandbox) error {
	err := b.ensureNetns(s)
	if err == nil {
		return nil
	}
	b.log.Warn("network of stopped sandbox is gone; rebuilding it", "sandbox", s.ID, "reason", err)
	if err := b.net.Detach(ctx, s.ID); err != nil {
		return fmt.Errorf("clear old network: %w", err)
	}
	att, err := b.net.Attach(ctx, s.ID)
	if err != nil {
		return fmt.Errorf("rebuild network: %w", err)
	}
	if s.NoInternet {
		if err := b.net.SetInternetAccess(ctx, s.ID, false); err != nil {
			return fmt.Errorf("block internet access: %w", err)
		}
	}
	s.Addr = att.Addr
	if _, err := writeEtcFiles(b.sandboxDir(s.ID), s.ID, s.Addr.String()); err != nil {
		return err
	}
	return b.saveState(s)
}
