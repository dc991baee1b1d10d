package runsc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/runtime/oci"
)

// NetConfigName is the file in the bundle directory where Start records the
// NetConfig of the container's network namespace (JSON).
const NetConfigName = "runsc-net.json"

// NetConfig is the IP configuration of the non-loopback interfaces of a network
// namespace: what runsc's netstack takes over and deletes from the namespace
// (docs/isolation.md, "runc and gVisor").
type NetConfig struct {
	Links []LinkConfig `json:"links"`
}

// LinkConfig is one interface's addresses and main-table routes.
type LinkConfig struct {
	Name   string        `json:"name"`   // interface name in the namespace, e.g. "eth0"
	Addrs  []string      `json:"addrs"`  // CIDR notation, e.g. "10.213.0.2/24"; IPv6 link-local omitted
	Routes []RouteConfig `json:"routes"` // routes via this interface, kernel-made ones omitted
}

// RouteConfig is one route (rtnetlink RTM_NEWROUTE fields).
type RouteConfig struct {
	Family   int    `json:"family"`             // unix.AF_INET or unix.AF_INET6
	Dst      string `json:"dst,omitempty"`      // CIDR; "" is the default route
	Gw       string `json:"gw,omitempty"`       // gateway address
	Src      string `json:"src,omitempty"`      // preferred source address
	Scope    uint8  `json:"scope"`              // rtnetlink scope (0 universe, 253 link)
	Priority int    `json:"priority,omitempty"` // metric
	Table    int    `json:"table,omitempty"`    // routing table, 254 main
}

// HasAddrs reports whether any interface of c has an address.
func (c NetConfig) HasAddrs() bool {
	for _, l := range c.Links {
		if len(l.Addrs) > 0 {
			return true
		}
	}
	return false
}

// ReadNetConfig reads the addresses and main-table routes of every non-loopback
// interface of the network namespace bind-mounted at nsPath (e.g.
// /var/run/netns/x). Errors come from opening the namespace or from rtnetlink.
func ReadNetConfig(nsPath string) (NetConfig, error) {
	h, err := handleAt(nsPath)
	if err != nil {
		return NetConfig{}, err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return NetConfig{}, fmt.Errorf("list links in %s: %w", nsPath, err)
	}
	var c NetConfig
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		lc, err := readLink(h, l)
		if err != nil {
			return NetConfig{}, fmt.Errorf("read %s in %s: %w", l.Attrs().Name, nsPath, err)
		}
		c.Links = append(c.Links, lc)
	}
	return c, nil
}

func readLink(h *netlink.Handle, l netlink.Link) (LinkConfig, error) {
	lc := LinkConfig{Name: l.Attrs().Name}
	addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return lc, err
	}
	for _, a := range addrs {
		if a.IP.To4() == nil && a.IP.IsLinkLocalUnicast() {
			continue
		}
		lc.Addrs = append(lc.Addrs, a.IPNet.String())
	}
	filter := &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_MAIN}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return lc, err
	}
	for _, rt := range routes {
		if rt.Protocol == unix.RTPROT_KERNEL {
			continue // comes back with its address
		}
		lc.Routes = append(lc.Routes, routeConfig(rt))
	}
	return lc, nil
}

func routeConfig(rt netlink.Route) RouteConfig {
	rc := RouteConfig{Family: rt.Family, Scope: uint8(rt.Scope), Priority: rt.Priority, Table: rt.Table}
	if rt.Dst != nil && !isDefault(rt.Dst) {
		rc.Dst = rt.Dst.String()
	}
	if rt.Gw != nil {
		rc.Gw = rt.Gw.String()
	}
	if rt.Src != nil {
		rc.Src = rt.Src.String()
	}
	return rc
}

func isDefault(n *net.IPNet) bool {
	ones, _ := n.Mask.Size()
	return ones == 0 && n.IP.IsUnspecified()
}

// Apply adds c's addresses to the interfaces of the same names in the network
// namespace at nsPath, then its routes (both replaced if present, so Apply is
// idempotent). Errors name the interface, address or route that failed.
func (c NetConfig) Apply(nsPath string) error {
	h, err := handleAt(nsPath)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, lc := range c.Links {
		if err := applyLink(h, lc); err != nil {
			return fmt.Errorf("configure %s in %s: %w", lc.Name, nsPath, err)
		}
	}
	return nil
}

func applyLink(h *netlink.Handle, lc LinkConfig) error {
	l, err := h.LinkByName(lc.Name)
	if err != nil {
		return err
	}
	for _, a := range lc.Addrs {
		addr, err := netlink.ParseAddr(a)
		if err != nil {
			return err
		}
		if err := h.AddrReplace(l, addr); err != nil {
			return fmt.Errorf("add address %s: %w", a, err)
		}
	}
	for _, rc := range lc.Routes {
		rt, err := rc.route(l.Attrs().Index)
		if err != nil {
			return err
		}
		if err := h.RouteReplace(rt); err != nil {
			return fmt.Errorf("add route %+v: %w", rc, err)
		}
	}
	return nil
}

func (rc RouteConfig) route(linkIndex int) (*netlink.Route, error) {
	rt := &netlink.Route{LinkIndex: linkIndex, Family: rc.Family, Scope: netlink.Scope(rc.Scope),
		Priority: rc.Priority, Table: rc.Table}
	if rc.Dst != "" {
		_, dst, err := net.ParseCIDR(rc.Dst)
		if err != nil {
			return nil, fmt.Errorf("route destination %q: %w", rc.Dst, err)
		}
		rt.Dst = dst
	}
	for _, f := range []struct {
		s   string
		dst *net.IP
	}{{rc.Gw, &rt.Gw}, {rc.Src, &rt.Src}} {
		if f.s == "" {
			continue
		}
		if *f.dst = net.ParseIP(f.s); *f.dst == nil {
			return nil, fmt.Errorf("route address %q: invalid", f.s)
		}
	}
	return rt, nil
}

func handleAt(nsPath string) (*netlink.Handle, error) {
	ns, err := netns.GetFromPath(nsPath)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", nsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", nsPath, err)
	}
	return h, nil
}

// specNetNS returns the network namespace path of the bundle's config.json, or ""
// when the spec has none (runsc then makes an empty one).
func specNetNS(bundle string) (string, error) {
	data, err := os.ReadFile(filepath.Join(bundle, oci.ConfigName))
	if err != nil {
		return "", fmt.Errorf("read bundle spec: %w", err)
	}
	var s specs.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return "", fmt.Errorf("parse bundle spec %s: %w", bundle, err)
	}
	if s.Linux == nil {
		return "", nil
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			return ns.Path, nil
		}
	}
	return "", nil
}

// saveNet records the configuration of the bundle's network namespace in
// bundle/NetConfigName when runsc is about to take it over (netstack network). A
// namespace without addresses (already taken over) keeps the earlier record.
func (r *Runtime) saveNet(bundle string) error {
	if r.opts.Network != "sandbox" {
		return nil
	}
	nsPath, err := specNetNS(bundle)
	if err != nil || nsPath == "" {
		return err
	}
	c, err := ReadNetConfig(nsPath)
	if err != nil || !c.HasAddrs() {
		return err
	}
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp := filepath.Join(bundle, "."+NetConfigName)
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("record network config: %w", err)
	}
	return os.Rename(tmp, filepath.Join(bundle, NetConfigName))
}

// reapplyNet puts the recorded configuration back into the bundle's network
// namespace if the namespace still exists and has no address. Without a record or
// with another network mode it does nothing.
func (r *Runtime) reapplyNet(bundle string) error {
	if r.opts.Network != "sandbox" || bundle == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(bundle, NetConfigName))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read network config: %w", err)
	}
	var saved NetConfig
	if err := json.Unmarshal(data, &saved); err != nil {
		return fmt.Errorf("parse %s: %w", NetConfigName, err)
	}
	nsPath, err := specNetNS(bundle)
	if err != nil || nsPath == "" {
		return err
	}
	if _, err := os.Stat(nsPath); errors.Is(err, os.ErrNotExist) {
		return nil // the namespace was deleted: nothing to repair
	}
	cur, err := ReadNetConfig(nsPath)
	if err != nil || cur.HasAddrs() {
		return err
	}
	return saved.Apply(nsPath)
}

// restoreNet is reapplyNet for clean-up paths: failures are logged.
func (r *Runtime) restoreNet(bundle string) {
	if err := r.reapplyNet(bundle); err != nil {
		r.log.Warn("restore network namespace addresses", "bundle", bundle, "err", err)
	}
}
