package network

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetnsFunc creates a network namespace and bind-mounts its nsfs file at path
// (which does not exist yet), e.g. one owned by a sandbox's user namespace
// (userns.Creator.Create). On error it leaves nothing behind.
type NetnsFunc func(path string) error

// Attach gives sandbox id its network: it allocates a free address, creates the
// named netns NetnsDir/Prefix+id and a veth pair whose host end (derived from
// id, <= 15 bytes) becomes the sandbox's routed host link and whose peer is
// eth0 in the netns (see the package doc for both ends), and adds the link to
// the firewall's sets. The sandbox starts with internet access allowed. On
// error nothing is left behind. Errors wrap ErrAlreadyAttached, ErrNoAddress or
// the failing netlink, sysctl, nf_tables or mount call.
func (m *Manager) Attach(ctx context.Context, id string) (Attachment, error) {
	return m.AttachWith(ctx, id, nil)
}

// AttachWith is Attach with the network namespace made by create (nil: this
// process creates it, owned by its own user namespace). The namespace is then
// configured as Attach does; on error its file is removed.
func (m *Manager) AttachWith(ctx context.Context, id string, create NetnsFunc) (Attachment, error) {
	if err := validID(id); err != nil {
		return Attachment{}, err
	}
	if err := ctx.Err(); err != nil {
		return Attachment{}, err
	}
	addr, err := m.reserve(id)
	if err != nil {
		return Attachment{}, err
	}
	att, err := m.build(id, addr, create)
	if err != nil {
		m.forget(id, addr)
		return Attachment{}, fmt.Errorf("attach network for %s: %w", id, err)
	}
	m.mu.Lock()
	m.sbx[id].ready = true
	m.mu.Unlock()
	m.log.Debug("attached", "id", id, "addr", addr, "veth", att.HostVeth)
	return att, nil
}

// reserve records id as being attached and allocates its address.
func (m *Manager) reserve(id string) (netip.Addr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.prepareDirLocked(); err != nil {
		return netip.Addr{}, err
	}
	if _, ok := m.sbx[id]; ok {
		return netip.Addr{}, fmt.Errorf("attach %s: %w", id, ErrAlreadyAttached)
	}
	addr, ok := m.alloc.takeFixed(id)
	if !ok {
		addr, ok = m.alloc.take(id)
	}
	if !ok {
		return netip.Addr{}, fmt.Errorf("attach %s in %s: %w", id, m.cfg.Subnet, ErrNoAddress)
	}
	m.sbx[id] = &sandbox{addr: addr}
	return addr, nil
}

// forget drops id's record and frees its address.
func (m *Manager) forget(id string, addr netip.Addr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sbx, id)
	m.alloc.release(id, addr)
}

func (m *Manager) attachment(id string, addr netip.Addr) Attachment {
	return Attachment{NetnsPath: m.netnsPath(id), Addr: addr, Gateway: m.gateway, HostVeth: m.vethName(id)}
}

// build creates the netns (with create, when set) and veth, configures both
// ends and registers the link in the firewall (clearing a no-internet mark a
// previous link of the same name may have left). On error it removes what it
// created.
func (m *Manager) build(id string, addr netip.Addr, create NetnsFunc) (Attachment, error) {
	att := m.attachment(id, addr)
	ns, err := createNetns(att.NetnsPath, create)
	if err != nil {
		return att, err
	}
	defer ns.close()
	veth, err := m.addVeth(id, att.HostVeth, ns.fd)
	var peer net.HardwareAddr
	if err == nil {
		peer, err = m.configureSandboxEnd(ns.nl, addr, gatewayMAC(m.cfg.Bridge))
	}
	if err == nil {
		err = m.configureHostEnd(veth, addr, peer)
	}
	if err == nil {
		m.mu.Lock()
		err = m.register(att.HostVeth, addr, true)
		m.mu.Unlock()
	}
	if err != nil {
		return att, errors.Join(err, m.deleteVeth(att.HostVeth), removeNetns(att.NetnsPath))
	}
	return att, nil
}

// cleanup removes the veth, the netns file and the firewall set elements of
// id (addr may be invalid when unknown). Missing pieces are not errors; the
// first real failure is returned after every step was tried.
func (m *Manager) cleanup(id string, addr netip.Addr) error {
	var errs []error
	if err := m.deleteVeth(m.vethName(id)); err != nil {
		errs = append(errs, err)
	}
	if err := removeNetns(m.netnsPath(id)); err != nil {
		errs = append(errs, err)
	}
	m.mu.Lock()
	err := m.unregister(m.vethName(id), addr)
	m.mu.Unlock()
	if err != nil && !errors.Is(err, unix.ENOENT) { // ENOENT: table already torn down
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (m *Manager) deleteVeth(name string) error {
	link, err := m.host.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up veth %s: %w", name, err)
	}
	if err := m.host.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete veth %s: %w", name, err)
	}
	return nil
}

// Detach removes sandbox id's veth, netns file and firewall set elements and
// releases its address. Unknown ids and missing pieces are not errors
// (idempotent); it still removes a leftover veth or netns file named for id.
// Processes still inside the netns keep it alive but lose their link.
func (m *Manager) Detach(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	m.mu.Lock()
	var addr netip.Addr
	if s, ok := m.sbx[id]; ok {
		if !s.ready {
			m.mu.Unlock()
			return fmt.Errorf("detach %s: attach or detach in progress", id)
		}
		s.ready = false
		addr = s.addr
	}
	m.mu.Unlock()
	if err := m.cleanup(id, addr); err != nil {
		m.mu.Lock()
		if s, ok := m.sbx[id]; ok {
			s.ready = true
		}
		m.mu.Unlock()
		return fmt.Errorf("detach network of %s: %w", id, err)
	}
	if addr.IsValid() {
		m.forget(id, addr)
	}
	m.log.Debug("detached", "id", id, "addr", addr)
	return nil
}

// Get returns the attachment of id, if attached (or adopted) and not being detached.
func (m *Manager) Get(id string) (Attachment, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sbx[id]
	if !ok || !s.ready {
		return Attachment{}, false
	}
	return m.attachment(id, s.addr), true
}

// SetInternetAccess allows or blocks traffic that sandbox id sends through the
// host to other networks (its host link in the nftables set "noinet"); sandbox
// <-> host and sandbox <-> sandbox traffic is blocked either way. Idempotent. Errors wrap
// ErrNotAttached or the nf_tables failure.
func (m *Manager) SetInternetAccess(ctx context.Context, id string, allowed bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sbx[id]
	if !ok || !s.ready {
		return fmt.Errorf("set internet access of %s: %w", id, ErrNotAttached)
	}
	if err := m.setInternet(m.vethName(id), allowed); err != nil {
		return err
	}
	m.log.Debug("internet access", "id", id, "addr", s.addr, "allowed", allowed)
	return nil
}

// Adopt re-registers sandbox id with address addr after a server restart: the
// netns file NetnsDir/Prefix+id must be a mounted netns and the host link must
// exist. The host end is configured again (a port of an older server's bridge
// is released and routed), the netns gets the permanent gateway neighbour for
// the link's MAC, and the link's firewall set elements are restored; its
// no-internet mark is kept as found. Addresses and routes inside the netns are
// left alone: a running gVisor sandbox keeps them in its own network stack.
// Adopting the same id with the same address again is a no-op. Errors wrap
// ErrAlreadyAttached for conflicting ids or addresses.
func (m *Manager) Adopt(id string, addr netip.Addr) error {
	if err := validID(id); err != nil {
		return err
	}
	if err := isNetns(m.netnsPath(id)); err != nil {
		return fmt.Errorf("adopt %s: %w", id, err)
	}
	m.mu.Lock()
	if s, ok := m.sbx[id]; ok {
		m.mu.Unlock()
		if s.addr == addr && s.ready {
			return nil
		}
		return fmt.Errorf("adopt %s at %s: %w (as %s)", id, addr, ErrAlreadyAttached, s.addr)
	}
	if !m.alloc.claim(id, addr) {
		m.mu.Unlock()
		return fmt.Errorf("adopt %s: address %s not assignable in %s or in use: %w", id, addr, m.cfg.Subnet, ErrAlreadyAttached)
	}
	m.sbx[id] = &sandbox{addr: addr}
	m.mu.Unlock()
	if err := m.readopt(id, addr); err != nil {
		m.forget(id, addr)
		return fmt.Errorf("adopt %s: %w", id, err)
	}
	m.mu.Lock()
	m.sbx[id].ready = true
	m.mu.Unlock()
	m.log.Debug("adopted", "id", id, "addr", addr)
	return nil
}

// readopt configures the host end of id's existing link, the gateway
// neighbour in its netns and its firewall set elements.
func (m *Manager) readopt(id string, addr netip.Addr) error {
	name := m.vethName(id)
	link, err := m.host.LinkByName(name)
	if err != nil {
		return fmt.Errorf("host veth %s: %w", name, err)
	}
	h, err := nsHandle(m.netnsPath(id))
	if err != nil {
		return err
	}
	defer h.Close()
	eth, err := h.LinkByName(sandboxIfname)
	if err != nil {
		return fmt.Errorf("find %s in netns: %w", sandboxIfname, err)
	}
	if err := m.configureHostEnd(link, addr, eth.Attrs().HardwareAddr); err != nil {
		return err
	}
	gw := permanentNeigh(eth.Attrs().Index, m.gateway, link.Attrs().HardwareAddr)
	if err := h.NeighSet(gw); err != nil {
		return fmt.Errorf("gateway neighbour in netns: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.register(name, addr, false)
}

// Restore configures sandbox id's netns again before its container starts
// anew (a filesystem resume, a checkpoint restore): gVisor's netstack takes
// eth0's address and routes out of the netns when it starts (and the kernel
// then drops eth0's neighbour entries), so they are put back; present settings
// are kept, the host end is checked too. Errors wrap ErrNotAttached, or name the
// netns or link that is missing (the caller may then rebuild with Detach and
// Attach).
func (m *Manager) Restore(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	att, ok := m.Get(id)
	if !ok {
		return fmt.Errorf("restore network of %s: %w", id, ErrNotAttached)
	}
	link, err := m.host.LinkByName(att.HostVeth)
	if err != nil {
		return fmt.Errorf("restore network of %s: host veth %s: %w", id, att.HostVeth, err)
	}
	h, err := nsHandle(att.NetnsPath)
	if err != nil {
		return fmt.Errorf("restore network of %s: %w", id, err)
	}
	defer h.Close()
	peer, err := m.configureSandboxEnd(h, att.Addr, link.Attrs().HardwareAddr)
	if err == nil {
		err = m.configureHostEnd(link, att.Addr, peer)
	}
	if err != nil {
		return fmt.Errorf("restore network of %s: %w", id, err)
	}
	return nil
}

// Addr reads the IPv4 address of eth0 inside the existing netns of id, for
// callers that must Adopt a sandbox but did not store its address.
func (m *Manager) Addr(id string) (netip.Addr, error) {
	if err := validID(id); err != nil {
		return netip.Addr{}, err
	}
	h, err := nsHandle(m.netnsPath(id))
	if err != nil {
		return netip.Addr{}, err
	}
	defer h.Close()
	eth, err := h.LinkByName(sandboxIfname)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("find %s of %s: %w", sandboxIfname, id, err)
	}
	addrs, err := h.AddrList(eth, netlink.FAMILY_V4)
	if err != nil || len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("no IPv4 address on %s of %s: %v", sandboxIfname, id, err)
	}
	a, _ := netip.AddrFromSlice(addrs[0].IP.To4())
	return a, nil
}

// Sweep removes leaked sandbox networks on start-up: every netns file in
// NetnsDir starting with Prefix, every host veth carrying this Manager's alias
// and every attachment the Manager tracks whose id is not in keep is detached;
// then firewall set elements of links no attached sandbox holds are removed.
// Call it after Adopt-ing the survivors. Errors of single removals are joined.
func (m *Manager) Sweep(ctx context.Context, keep map[string]bool) error {
	stale, err := m.staleIDs(keep)
	if err != nil {
		return err
	}
	var errs []error
	for id := range stale {
		if err := ctx.Err(); err != nil {
			return err
		}
		m.log.Info("sweeping leaked sandbox network", "id", id)
		if err := m.Detach(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	m.mu.Lock()
	err = m.pruneSets()
	m.mu.Unlock()
	return errors.Join(append(errs, err)...)
}

// staleIDs lists ids with a netns file, an aliased veth or a record that are not in keep.
func (m *Manager) staleIDs(keep map[string]bool) (map[string]bool, error) {
	stale := make(map[string]bool)
	entries, err := os.ReadDir(m.cfg.NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", m.cfg.NetnsDir, err)
	}
	keep = maps.Clone(keep)
	if keep == nil {
		keep = map[string]bool{}
	}
	keep[EgressID] = true // the egress proxy's network is AttachEgress's
	for _, e := range entries {
		id, ok := strings.CutPrefix(e.Name(), m.cfg.Prefix)
		if ok && validID(id) == nil && !keep[id] {
			stale[id] = true
		}
	}
	links, err := m.host.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		id, ok := strings.CutPrefix(l.Attrs().Alias, m.aliasPrefix())
		if ok && validID(id) == nil && !keep[id] {
			stale[id] = true
		}
	}
	m.mu.Lock()
	for id, s := range m.sbx {
		if s.ready && !keep[id] {
			stale[id] = true
		}
	}
	m.mu.Unlock()
	return stale, nil
}
