package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultLockDir holds one lock file per bridge of a running server
// (<bridge>.lock, flock(2)-locked by the server, holding its pid).
const DefaultLockDir = "/run/cubby/bridges"

// tablePrefix starts the default nftables table name of a bridge ("cubby_" + bridge).
const tablePrefix = "cubby_"

// ErrBridgeInUse is wrapped by Claim when another live process holds the bridge.
var ErrBridgeInUse = errors.New("bridge in use by another server")

// ErrSubnetConflict is wrapped by Claim when the subnet overlaps a network of the host.
var ErrSubnetConflict = errors.New("subnet overlaps a network of the host")

// Claim makes the Manager the only user of its bridge on this host and checks
// that its subnet is free, before Setup touches anything: ClaimBridge, then it
// fails with ErrSubnetConflict, naming the route or address and its device, when
// Subnet overlaps an IPv4 route (other than the default route) or interface
// address of the host that is not on the Manager's own bridge or sandbox links
// (those left by a stopped server of the same name are the Manager's to reuse). On failure the
// bridge is not held. Claiming again is a no-op.
func (m *Manager) Claim() error { return m.claim(true) }

// ClaimBridge takes the bridge's lock in LockDir for the life of the Manager
// (released by Close or the process's exit) without checking the subnet, as
// tearing a stopped server's network down needs. It fails with ErrBridgeInUse
// and the holder's pid while another live process holds it.
func (m *Manager) ClaimBridge() error { return m.claim(false) }

// claim takes the bridge lock and, with checkSubnet, checks the subnet.
func (m *Manager) claim(checkSubnet bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lock != nil {
		return nil
	}
	f, err := lockBridge(m.cfg.LockDir, m.cfg.Bridge)
	if err != nil {
		return err
	}
	if checkSubnet {
		if err := m.checkSubnet(); err != nil {
			f.Close()
			return err
		}
	}
	m.lock = f
	return nil
}

// unlock releases the bridge lock, if held.
func (m *Manager) unlock() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lock != nil {
		m.lock.Close()
		m.lock = nil
	}
}

// lockBridge takes dir/<bridge>.lock and writes the caller's pid into it.
func lockBridge(dir, bridge string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bridge lock: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, bridge+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("bridge lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		pid, _ := os.ReadFile(f.Name())
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: bridge %s is held by another cubby process (pid %s): a running server or template build; give this one its own --bridge and --subnet",
				ErrBridgeInUse, bridge, strings.TrimSpace(string(pid)))
		}
		return nil, fmt.Errorf("bridge lock %s: %w", f.Name(), err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// checkSubnet fails when Subnet overlaps a host route or address that is not
// on the Manager's own links.
func (m *Manager) checkSubnet() error {
	own, err := m.ownLinks()
	if err != nil {
		return err
	}
	routes, err := whole(func() ([]netlink.Route, error) { return m.host.RouteList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil || own[r.LinkIndex] {
			continue
		}
		p, ok := prefixOf(r.Dst)
		if ok && p.Bits() > 0 && p.Overlaps(m.cfg.Subnet) {
			return m.conflict("route "+p.String(), r.LinkIndex)
		}
	}
	addrs, err := whole(func() ([]netlink.Addr, error) { return m.host.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return fmt.Errorf("list addresses: %w", err)
	}
	for _, a := range addrs {
		if own[a.LinkIndex] {
			continue
		}
		if p, ok := prefixOf(a.IPNet); ok && p.Overlaps(m.cfg.Subnet) {
			return m.conflict("address "+a.IPNet.String(), a.LinkIndex)
		}
	}
	return nil
}

// dumpTries bounds the retries of a netlink dump the kernel interrupted.
const dumpTries = 10

// whole runs the netlink dump list again while the kernel reports it
// interrupted (netlink.ErrDumpInterrupted: the table changed meanwhile, as it
// does while other servers attach sandboxes), so a check never judges a
// partial list. Errors: the dump's, or its interruption after dumpTries tries.
func whole[T any](list func() ([]T, error)) ([]T, error) {
	for i := 1; ; i++ {
		v, err := list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || i == dumpTries {
			return v, err
		}
	}
}

// ownLinks are the indexes of the bridge and of the host links of the
// Manager's sandboxes (their alias starts with aliasPrefix): a restarted server
// finds the /32 routes of the sandboxes it kept on those.
func (m *Manager) ownLinks() (map[int]bool, error) {
	links, err := whole(m.host.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	own := map[int]bool{}
	for _, l := range links {
		a := l.Attrs()
		if a.Name == m.cfg.Bridge || strings.HasPrefix(a.Alias, m.aliasPrefix()) {
			own[a.Index] = true
		}
	}
	return own, nil
}

func (m *Manager) conflict(what string, link int) error {
	dev := "device #" + strconv.Itoa(link)
	if l, err := m.host.LinkByIndex(link); err == nil {
		dev = l.Attrs().Name
	}
	return fmt.Errorf("%w: --subnet %s overlaps %s on %s (another Cubby server's bridge, or another network); "+
		"choose a free --subnet, or remove a stopped server's bridge with `cubby network teardown --bridge %s`",
		ErrSubnetConflict, m.cfg.Subnet, what, dev, dev)
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}

// Leaks returns the host networks of Cubby servers that no running server
// holds: the "cubby_<bridge>" inet tables and the bridges of those names whose
// lock in lockDir is free. Errors: listing tables or links failed.
func Leaks(lockDir string) ([]string, error) {
	c, err := nftables.New()
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, fmt.Errorf("list nft tables: %w", err)
	}
	var leaks []string
	for _, t := range tables {
		bridge, ok := strings.CutPrefix(t.Name, tablePrefix)
		if !ok || held(lockDir, bridge) {
			continue
		}
		leaks = append(leaks, "nftables table inet "+t.Name)
		if l, err := netlink.LinkByName(bridge); err == nil && l.Type() == "bridge" {
			leaks = append(leaks, "bridge "+bridge)
		}
	}
	sort.Strings(leaks)
	return leaks, nil
}

// held reports whether a live process holds bridge's lock.
func held(lockDir, bridge string) bool {
	f, err := os.Open(filepath.Join(lockDir, bridge+".lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
