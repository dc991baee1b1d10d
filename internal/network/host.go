package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
)

const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// Setup prepares the host idempotently, after Claim-ing the bridge and subnet
// (errors wrap ErrBridgeInUse or ErrSubnetConflict): the bridge exists with a fixed MAC and
// the gateway address (first host address of Subnet, with the subnet's prefix)
// and is up (it never gets ports: sandboxes are routed, see the package doc);
// net.ipv4.ip_forward is 1; the nftables table is (re)built atomically, keeping
// the members of its sets, so running sandboxes keep their firewall across a
// restart; NetnsDir is a shared mount point.
// Call it before Attach, Adopt and SetInternetAccess, on every server start.
// Errors name the step that failed.
func (m *Manager) Setup(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := m.Claim(); err != nil {
		return err
	}
	if err := m.ensureBridge(); err != nil {
		return err
	}
	if err := enableForwarding(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.applyFirewall(); err != nil {
		return err
	}
	if err := m.prepareDirLocked(); err != nil {
		return err
	}
	m.log.Info("network ready", "subnet", m.cfg.Subnet, "gateway", m.gateway, "table", m.cfg.Table)
	return nil
}

// prepareDirLocked prepares NetnsDir once per Manager. Called with m.mu held.
func (m *Manager) prepareDirLocked() error {
	if m.dirDone {
		return nil
	}
	if err := prepareNetnsDir(m.cfg.NetnsDir); err != nil {
		return err
	}
	m.dirDone = true
	return nil
}

func (m *Manager) ensureBridge() error {
	br, err := m.host.LinkByName(m.cfg.Bridge)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		br = &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{
			Name: m.cfg.Bridge, HardwareAddr: gatewayMAC(m.cfg.Bridge), TxQLen: -1}}
		if err := m.host.LinkAdd(br); err != nil {
			return fmt.Errorf("create bridge %s: %w", m.cfg.Bridge, err)
		}
	case err != nil:
		return fmt.Errorf("look up bridge %s: %w", m.cfg.Bridge, err)
	case br.Type() != "bridge":
		return fmt.Errorf("link %s exists and is a %s, not a bridge", m.cfg.Bridge, br.Type())
	}
	gw := &netlink.Addr{IPNet: &net.IPNet{
		IP:   m.gateway.AsSlice(),
		Mask: net.CIDRMask(m.cfg.Subnet.Bits(), 32),
	}}
	if err := m.host.AddrReplace(br, gw); err != nil {
		return fmt.Errorf("assign %s to bridge %s: %w", m.gateway, m.cfg.Bridge, err)
	}
	if err := m.dropStaleAddrs(br, gw); err != nil {
		return err
	}
	if err := m.host.LinkSetUp(br); err != nil {
		return fmt.Errorf("bring up bridge %s: %w", m.cfg.Bridge, err)
	}
	return nil
}

// dropStaleAddrs removes the IPv4 addresses of the bridge other than keep (left
// by a stopped server that used another subnet; the bridge is claimed).
func (m *Manager) dropStaleAddrs(br netlink.Link, keep *netlink.Addr) error {
	addrs, err := m.host.AddrList(br, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list addresses of bridge %s: %w", m.cfg.Bridge, err)
	}
	for _, a := range addrs {
		if a.IPNet.String() == keep.IPNet.String() {
			continue
		}
		if err := m.host.AddrDel(br, &a); err != nil {
			return fmt.Errorf("remove stale address %s from bridge %s: %w", a.IPNet, m.cfg.Bridge, err)
		}
		m.log.Info("removed stale bridge address", "addr", a.IPNet.String())
	}
	return nil
}

// enableForwarding sets net.ipv4.ip_forward=1 unless it already is.
func enableForwarding() error {
	b, err := os.ReadFile(ipForwardPath)
	if err == nil && bytes.HasPrefix(b, []byte("1")) {
		return nil
	}
	if err := os.WriteFile(ipForwardPath, []byte("1"), 0); err != nil {
		return fmt.Errorf("enable ip_forward: %w", err)
	}
	return nil
}

// Teardown deletes the nftables table and the bridge; missing ones are not an
// error. It does not touch sandbox netns or veths (Detach or Sweep them first)
// and leaves net.ipv4.ip_forward as it is, since other software may rely on it.
func (m *Manager) Teardown(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.deleteTable(); err != nil {
		return err
	}
	br, err := m.host.LinkByName(m.cfg.Bridge)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up bridge %s: %w", m.cfg.Bridge, err)
	}
	if err := m.host.LinkDel(br); err != nil {
		return fmt.Errorf("delete bridge %s: %w", m.cfg.Bridge, err)
	}
	m.log.Info("network torn down", "table", m.cfg.Table)
	return nil
}
