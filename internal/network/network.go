// Package network gives every sandbox its own network namespace joined to the
// host by a routed point-to-point link, with no layer-2 segment shared between
// sandboxes or trusted by the host:
//
//   - a named netns bind-mounted under a directory (as ip-netns(8) does);
//   - a veth pair whose host end is a standalone link (no bridge port) and whose
//     peer is the sandbox's eth0. eth0 holds the sandbox's address as a /32 with
//     a link route to the gateway, a default route via it and a permanent
//     neighbour entry for it; IPv6 is disabled before eth0 exists, and
//     net.ipv4.ping_group_range lets every uid open ICMP datagram sockets (ping
//     without CAP_NET_RAW);
//   - on the host end: IFF_NOARP (the kernel drops every ARP frame arriving on
//     it), IPv6 disabled, strict reverse-path filtering, no ICMP redirects, a
//     permanent neighbour entry for the sandbox's eth0 and the route to the
//     sandbox's /32 with the gateway address as source. The host reaches each
//     sandbox only over that sandbox's own link, so nothing one sandbox sends
//     (forged ARP, forged addresses) can change where the host sends another
//     sandbox's traffic;
//   - one nftables table (family inet) that drops what a sandbox link carries
//     with a source other than its own address (sets keyed by interface), IPv6
//     and anything sent onto a link for another address; isolates sandboxes from
//     each other and from host services; cuts internet access per sandbox
//     interface; and masquerades egress that came in on a sandbox interface.
//
// This is the layout of routed container networks (Calico's, for one): without
// a bridge there is no broadcast domain to poison and no neighbour table shared
// by sandboxes, and every decision keys on the interface a packet came in on,
// which a process inside a sandbox cannot forge, rather than on addresses it can.
//
// Config.Bridge keeps its name for compatibility (serve's --bridge): it names a
// host bridge that never has ports and only holds the gateway address (the first
// host address of the subnet, with the subnet's prefix, so the subnet routes
// there and never leaks to the host's default route); it also names the nftables
// table and, through the server's Prefix, starts the netns and host link names.
// A bridge of an older server (sandboxes as bridge ports) is taken over: Adopt
// releases each surviving port and makes it a routed link.
//
// Host-to-sandbox connections are pinned to the sandbox's host link with
// SO_BINDTODEVICE (package internal/linkdial), so a stale address cannot lead
// them to another sandbox.
//
// Everything is done through netlink (rtnetlink and nf_tables), mount(2) and
// /proc/sys writes for per-interface settings; no external tools are run.
package network

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultBridge   = "cubby0"
	DefaultNetnsDir = "/run/netns"
	DefaultPrefix   = "cubby-"
)

// DefaultSubnet is the sandbox subnet used when Config.Subnet is the zero value.
var DefaultSubnet = netip.MustParsePrefix("10.77.0.0/16")

// ErrNotAttached is returned (wrapped) for an id the Manager has no attachment for.
var ErrNotAttached = errors.New("sandbox network not attached")

// ErrAlreadyAttached is returned (wrapped) by Attach and Adopt for an id that is
// already attached (or being attached) with different parameters.
var ErrAlreadyAttached = errors.New("sandbox network already attached")

// ErrNoAddress is returned (wrapped) by Attach when every host address of the
// subnet is allocated.
var ErrNoAddress = errors.New("no free address in sandbox subnet")

// Config selects the host resources one Manager owns. One Manager (one server)
// owns a Bridge, its Subnet and its Table exclusively; Prefix separates the
// netns files and veths of Managers sharing NetnsDir. Two Prefixes must not be
// prefixes of each other, because Sweep treats every NetnsDir entry starting
// with Prefix as its own.
type Config struct {
	// Bridge is the name (<= 15 bytes) of the portless host bridge holding the
	// gateway address, default "cubby0".
	Bridge string
	// Subnet is the IPv4 sandbox subnet, /8 to /30, default 10.77.0.0/16. Its first
	// host address is the gateway, assigned to the bridge; every sandbox gets one
	// other host address of it, routed as a /32 over its own host link.
	Subnet netip.Prefix
	// Table is the nftables table name (family inet), default "cubby_"+Bridge.
	Table string
	// NetnsDir is where named netns are bind-mounted, default /run/netns (the
	// directory ip-netns(8) uses, so `ip netns exec` works on sandboxes).
	NetnsDir string
	// Prefix starts every netns file name (Prefix+id) and the host veth names,
	// default "cubby-". It must not contain '/'.
	Prefix string
	// LockDir holds the bridge locks of running servers (Claim), default
	// DefaultLockDir.
	LockDir string
}

// Attachment describes the network of one attached sandbox.
type Attachment struct {
	// NetnsPath is the bind-mounted netns file (NetnsDir/Prefix+id), suitable for an
	// OCI runtime spec "network" namespace path (OCI runtime spec, linux.namespaces).
	NetnsPath string
	// Addr is the sandbox's address, a /32 on eth0.
	Addr netip.Addr
	// Gateway is the gateway address (on the bridge), the sandbox's default route.
	Gateway netip.Addr
	// HostVeth is the host end of the veth pair (<= 15 bytes): a standalone link
	// carrying only this sandbox's traffic. Host-to-sandbox connections bind to it.
	HostVeth string
}

// Manager creates and removes per-sandbox networks. It is safe for concurrent use.
type Manager struct {
	cfg     Config
	gateway netip.Addr
	log     *slog.Logger
	host    *netlink.Handle // rtnetlink socket in the host (caller's) netns

	mu      sync.Mutex // guards sbx, alloc, noinet and nft set updates
	sbx     map[string]*sandbox
	alloc   *allocator
	noinet  map[string]bool // mirror of the nft set "noinet" (host link names); nil = unknown (before Setup)
	ports   EgressPorts     // egress proxy ports on the gateway; zero = no steering rules
	dirDone bool            // NetnsDir prepared as a shared mount point
	lock    *os.File        // the bridge lock (Claim); nil until claimed
}

// sandbox is the Manager's record of one id; ready is false while Attach runs
// and while Detach cleans up.
type sandbox struct {
	addr  netip.Addr
	ready bool
}

// New validates cfg, applies defaults and returns a Manager. It touches no host
// state except opening an rtnetlink socket; call Setup before Attach. Errors:
// invalid names or subnet, or failure to open the socket.
func New(cfg Config, log *slog.Logger) (*Manager, error) {
	cfg, err := normalize(cfg)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open rtnetlink socket: %w", err)
	}
	gw := cfg.Subnet.Addr().Next()
	alloc := newAllocator(cfg.Subnet, gw)
	alloc.reserveLast(EgressID)
	return &Manager{
		cfg:     cfg,
		gateway: gw,
		log:     log.With("component", "network", "bridge", cfg.Bridge),
		host:    h,
		sbx:     make(map[string]*sandbox),
		alloc:   alloc,
	}, nil
}

// Close releases the Manager's netlink socket and its bridge lock. Host state
// is left as is.
func (m *Manager) Close() error {
	m.host.Close()
	m.unlock()
	return nil
}

// Config returns the effective configuration (defaults applied).
func (m *Manager) Config() Config { return m.cfg }

// Gateway returns the gateway address, the first host address of the subnet.
func (m *Manager) Gateway() netip.Addr { return m.gateway }

// HostVeth returns the name of sandbox id's host link (whether or not it
// exists): the interface host-to-sandbox connections must be bound to.
func (m *Manager) HostVeth(id string) string { return m.vethName(id) }

func normalize(cfg Config) (Config, error) {
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultBridge
	}
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	if cfg.Table == "" {
		cfg.Table = tablePrefix + cfg.Bridge
	}
	if cfg.LockDir == "" {
		cfg.LockDir = DefaultLockDir
	}
	if cfg.NetnsDir == "" {
		cfg.NetnsDir = DefaultNetnsDir
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := validIfname(cfg.Bridge); err != nil {
		return cfg, fmt.Errorf("bridge: %w", err)
	}
	if !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() < 8 || cfg.Subnet.Bits() > 30 {
		return cfg, fmt.Errorf("subnet %s: want an IPv4 prefix between /8 and /30", cfg.Subnet)
	}
	cfg.Subnet = cfg.Subnet.Masked()
	if len(cfg.Table) > 255 {
		return cfg, fmt.Errorf("table name %q too long", cfg.Table)
	}
	if strings.ContainsAny(cfg.Prefix, "/\x00") {
		return cfg, fmt.Errorf("prefix %q must not contain '/' or NUL", cfg.Prefix)
	}
	if !filepath.IsAbs(cfg.NetnsDir) {
		return cfg, fmt.Errorf("netns dir %q must be absolute", cfg.NetnsDir)
	}
	return cfg, nil
}

// validIfname reports whether name is a valid Linux interface name.
func validIfname(name string) error {
	if name == "" || len(name) > unix.IFNAMSIZ-1 || name == "." || name == ".." {
		return fmt.Errorf("invalid interface name %q (1-15 bytes)", name)
	}
	if strings.ContainsAny(name, "/: \t\n\x00") {
		return fmt.Errorf("invalid interface name %q", name)
	}
	return nil
}

// validID accepts sandbox ids usable in file and alias names.
func validID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("invalid sandbox id %q: want 1-128 characters", id)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !ok {
			return fmt.Errorf("invalid sandbox id %q: want [A-Za-z0-9._-]", id)
		}
	}
	if id == "." || id == ".." {
		return fmt.Errorf("invalid sandbox id %q", id)
	}
	return nil
}

// netnsPath returns NetnsDir/Prefix+id.
func (m *Manager) netnsPath(id string) string {
	return filepath.Join(m.cfg.NetnsDir, m.cfg.Prefix+id)
}

// vethName derives the host veth name (<= 15 bytes) from Prefix and id: up to 5
// interface-safe characters of Prefix followed by 10 hex digits of
// SHA-256(Prefix + "/" + id).
func (m *Manager) vethName(id string) string {
	var head []byte
	for i := 0; i < len(m.cfg.Prefix) && len(head) < 5; i++ {
		c := m.cfg.Prefix[i]
		if c > ' ' && c < 0x7f && c != ':' && c != '/' {
			head = append(head, c)
		}
	}
	sum := sha256.Sum256([]byte(m.cfg.Prefix + "/" + id))
	return string(head) + hex.EncodeToString(sum[:5])
}

// aliasPrefix starts the IFLA_IFALIAS of every host veth this Manager creates;
// the id follows it.
func (m *Manager) aliasPrefix() string { return "cubby:" + m.cfg.Prefix + "/" }

// gatewayMAC derives a stable, locally administered unicast MAC from the bridge
// name. The bridge and every host link of its sandboxes carry it: each host link
// is its own layer-2 segment, so they may share it, and sandboxes adopted from a
// server that bridged them keep a valid gateway neighbour entry.
func gatewayMAC(name string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("cubby-bridge/" + name))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&0xfe | 0x02
	return mac
}
