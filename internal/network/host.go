package network

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

const ipForwardPath = "/proc/sys/net/ipv4/ip_forward"

// Setup prepares the host idempotently: the bridge exists with a fixed MAC and
// the gateway address (first host address of Subnet), is up and passes bridged
// IPv4/IPv6 to nftables (per-bridge nf_call_iptables; a failure there is only
// logged); net.ipv4.ip_forward is 1; the nftables table is (re)built atomically,
// keeping the members of its no-internet set; NetnsDir is a shared mount point.
// Call it before Attach, Adopt and SetInternetAccess, on every server start.
// Errors name the step that failed.
func (m *Manager) Setup(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := m.ensureBridge(); err != nil {
		return err
	}
	if err := enableForwarding(); err != nil {
		return err
	}
	if err := m.bridgeNFCall(); err != nil {
		m.log.Warn("cannot make bridged traffic pass nftables; sandbox isolation relies on isolated bridge ports only", "err", err)
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
			Name: m.cfg.Bridge, HardwareAddr: bridgeMAC(m.cfg.Bridge), TxQLen: -1}}
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
	if err := m.host.LinkSetUp(br); err != nil {
		return fmt.Errorf("bring up bridge %s: %w", m.cfg.Bridge, err)
	}
	return nil
}

// bridgeNFCall sets the bridge's own nf_call_iptables/ip6tables options
// (IFLA_BR_NF_CALL_*, rtnetlink) so bridged sandbox-to-sandbox packets traverse
// the inet forward chain even when the global bridge-nf-call-* sysctls are 0.
func (m *Manager) bridgeNFCall() error {
	br, err := m.host.LinkByName(m.cfg.Bridge)
	if err != nil {
		return fmt.Errorf("look up bridge %s: %w", m.cfg.Bridge, err)
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(br.Attrs().Index)
	req.AddData(msg)
	info := nl.NewRtAttr(unix.IFLA_LINKINFO, nil)
	info.AddRtAttr(nl.IFLA_INFO_KIND, nl.NonZeroTerminated("bridge"))
	data := info.AddRtAttr(nl.IFLA_INFO_DATA, nil)
	data.AddRtAttr(unix.IFLA_BR_NF_CALL_IPTABLES, []byte{1})
	data.AddRtAttr(unix.IFLA_BR_NF_CALL_IP6TABLES, []byte{1})
	req.AddData(info)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("set nf_call_iptables on bridge %s: %w", m.cfg.Bridge, err)
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
