package network

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Egress policy objects of the Manager's nftables table (see applyFirewall):
//
//	set allow    { type ifname . ipv4_addr; flags interval }  # allowOut addresses per link
//	set deny     { type ifname . ipv4_addr; flags interval }  # denyOut addresses per link
//	set steer    { type ifname }  # links whose HTTP(S) and DNS go to the egress proxy
//	set steerall { type ifname }  # links whose every TCP connection goes to it
//	chain forward { ...; iifname . ip daddr @allow ct state new limit log group G prefix "cubby:allow"
//	  iifname . ip daddr @allow accept; iifname . ip daddr @deny limit log group G prefix "cubby:deny"
//	  iifname . ip daddr @deny jump reject }
//	chain steering { type nat hook prerouting priority dstnat;
//	  iifname @steer udp dport 53 dnat ip to GW:DNS; iifname @steer tcp dport 53 dnat ip to GW:DNS
//	  iifname @steer tcp dport { 80, 443 } dnat ip to GW:PROXY; iifname @steerall tcp dnat ip to GW:PROXY }
//	chain input { ...; iifname @links ct status dnat ip daddr GW tcp dport PROXY accept (and DNS, tcp and udp) }
//
// Allowed entries are checked before denied ones (allow beats deny); both come
// after the isolation rules, so no policy opens sandbox-to-sandbox or
// sandbox-to-host traffic. The filter rules apply to every packet, not only to
// new connections: a connection a new policy denies is cut (its next packet
// from the sandbox is answered with a TCP reset). Steered connections reach
// the proxy only through the DNAT (ct status dnat): a sandbox cannot connect to
// the proxy's ports itself, and nothing else on the host is opened.
const (
	setAllow      = "allow"
	setDeny       = "deny"
	setSteer      = "steer"
	setSteerAll   = "steerall"
	chainSteering = "steering"
)

// Ports the proxy steering rules use.
const (
	dnsPort   = 53
	httpPort  = 80
	httpsPort = 443
)

// EgressID is the reserved id of the egress proxy's own network (AttachEgress):
// the proxy dials the connections it allows from there, so they cross the host
// exactly like a sandbox's own traffic (same isolation rules, masquerade). It
// is not a valid sandbox ID, and Sweep never removes it.
const EgressID = "_egress"

// EgressRules is the part of a sandbox's egress policy nftables enforces.
type EgressRules struct {
	Allow []netip.Prefix // IPv4 destinations always allowed
	Deny  []netip.Prefix // IPv4 destinations denied unless allowed
	// Steer sends the sandbox's TCP to ports 80 and 443 and its DNS (UDP and
	// TCP port 53) to the egress proxy, which decides them by name.
	Steer bool
	// SteerAllTCP sends every TCP connection of the sandbox to the proxy.
	SteerAllTCP bool
}

// EgressPorts are the host ports, on the gateway address, the egress proxy
// listens on: TCP Proxy for steered connections, TCP and UDP DNS for queries.
type EgressPorts struct {
	Proxy uint16
	DNS   uint16
}

// policySets returns the egress sets (IDs follow those of sets).
func (m *Manager) policySets() (allow, deny, steer, steerAll *nftables.Set) {
	t := m.table()
	addrs := nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)
	return &nftables.Set{Table: t, ID: 4, Name: setAllow, Concatenation: true, Interval: true, KeyType: addrs},
		&nftables.Set{Table: t, ID: 5, Name: setDeny, Concatenation: true, Interval: true, KeyType: addrs},
		&nftables.Set{Table: t, ID: 6, Name: setSteer, KeyType: nftables.TypeIFName},
		&nftables.Set{Table: t, ID: 7, Name: setSteerAll, KeyType: nftables.TypeIFName}
}

// allSets returns every set of the table.
func (m *Manager) allSets() []*nftables.Set {
	links, own, noinet := m.sets()
	allow, deny, steer, steerAll := m.policySets()
	return []*nftables.Set{links, own, noinet, allow, deny, steer, steerAll}
}

// SetEgressPorts records the egress proxy's ports and rebuilds the firewall
// with the steering rules (atomically, keeping every set's members). Call it
// after Setup, before the first SetEgress with steering.
func (m *Manager) SetEgressPorts(ctx context.Context, p EgressPorts) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.Proxy == 0 || p.DNS == 0 {
		return fmt.Errorf("egress ports %+v: both must be set", p)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ports = p
	return m.applyFirewall()
}

// SetEgress replaces the egress rules of sandbox id's link in one nf_tables
// transaction: from the commit on, packets follow the new rules (established
// connections included). The zero EgressRules removes them. Errors wrap
// ErrNotAttached or the nf_tables failure; steering without SetEgressPorts is
// an error.
func (m *Manager) SetEgress(ctx context.Context, id string, r EgressRules) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sbx[id]; !ok || !s.ready {
		return fmt.Errorf("set egress rules of %s: %w", id, ErrNotAttached)
	}
	if (r.Steer || r.SteerAllTCP) && m.ports.Proxy == 0 {
		return fmt.Errorf("set egress rules of %s: steering needs the egress proxy's ports", id)
	}
	name := m.vethName(id)
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if err := m.clearEgress(c, name); err != nil {
		return err
	}
	if err := m.addEgress(c, name, r); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("set egress rules of %s in nft table %s: %w", id, m.cfg.Table, err)
	}
	m.log.Debug("egress rules", "id", id, "allow", len(r.Allow), "deny", len(r.Deny), "steer", r.Steer, "steerAll", r.SteerAllTCP)
	return nil
}

// clearEgress queues the removal of every egress element of link name.
func (m *Manager) clearEgress(c *nftables.Conn, name string) error {
	allow, deny, steer, steerAll := m.policySets()
	for _, set := range []*nftables.Set{allow, deny, steer, steerAll} {
		elems, err := m.elements(c, set)
		if err != nil {
			return err
		}
		var drop []nftables.SetElement
		for _, e := range elems {
			if keyIfname(e.Key) == name {
				drop = append(drop, nftables.SetElement{Key: e.Key, KeyEnd: e.KeyEnd})
			}
		}
		if len(drop) > 0 {
			if err := c.SetDeleteElements(set, drop); err != nil {
				return err
			}
		}
	}
	return nil
}

// addEgress queues the elements of r for link name.
func (m *Manager) addEgress(c *nftables.Conn, name string, r EgressRules) error {
	allow, deny, steer, steerAll := m.policySets()
	for _, op := range []struct {
		set  *nftables.Set
		nets []netip.Prefix
	}{{allow, r.Allow}, {deny, r.Deny}} {
		if elems := rangeElements(name, op.nets); len(elems) > 0 {
			if err := c.SetAddElements(op.set, elems); err != nil {
				return err
			}
		}
	}
	key := []nftables.SetElement{{Key: ifnameKey(name)}}
	if r.Steer || r.SteerAllTCP {
		if err := c.SetAddElements(steer, key); err != nil {
			return err
		}
	}
	if r.SteerAllTCP {
		return c.SetAddElements(steerAll, key)
	}
	return nil
}

// rangeElements turns prefixes into "ifname . addr-range" interval elements,
// merging overlapping and adjacent ones (the kernel refuses overlaps).
func rangeElements(name string, nets []netip.Prefix) []nftables.SetElement {
	type span struct{ lo, hi uint32 }
	var spans []span
	for _, p := range nets {
		if !p.Addr().Is4() {
			continue
		}
		p = p.Masked()
		lo := binary.BigEndian.Uint32(p.Addr().AsSlice())
		hi := lo | uint32(uint64(1)<<(32-p.Bits())-1)
		spans = append(spans, span{lo, hi})
	}
	slices.SortFunc(spans, func(a, b span) int { return int(int64(a.lo) - int64(b.lo)) })
	var merged []span
	for _, s := range spans {
		if n := len(merged); n > 0 && uint64(s.lo) <= uint64(merged[n-1].hi)+1 {
			merged[n-1].hi = max(merged[n-1].hi, s.hi)
			continue
		}
		merged = append(merged, s)
	}
	out := make([]nftables.SetElement, 0, len(merged))
	for _, s := range merged {
		out = append(out, nftables.SetElement{
			Key:    binary.BigEndian.AppendUint32(ifnameKey(name), s.lo),
			KeyEnd: binary.BigEndian.AppendUint32(ifnameKey(name), s.hi),
		})
	}
	return out
}

// addPolicyRules appends the allow and deny rules to the forward chain ch,
// each preceded by its (rate-limited) decision log rule (see nflog.go).
func (m *Manager) addPolicyRules(c *nftables.Conn, ch *nftables.Chain) {
	allow, deny, _, _ := m.policySets()
	allowed := concat(ipv4(), ifnameAddrIn(expr.MetaKeyIIFNAME, 16, allow))
	denied := concat(ipv4(), ifnameAddrIn(expr.MetaKeyIIFNAME, 16, deny))
	addRules(c, ch,
		concat(allowed, ctBits(expr.CtKeySTATE, expr.CtStateBitNEW, expr.CmpOpNeq), m.logExprs(logPrefixAllow)),
		concat(allowed, verdict(expr.VerdictAccept)),
		concat(denied, m.logExprs(logPrefixDeny)),
		concat(denied, jump(chainReject)))
}

// addSteeringChain adds the DNAT chain sending steered links' traffic to the
// egress proxy; nothing when its ports are unknown.
func (m *Manager) addSteeringChain(c *nftables.Conn, t *nftables.Table) {
	if m.ports.Proxy == 0 {
		return
	}
	_, _, steer, steerAll := m.policySets()
	ch := c.AddChain(&nftables.Chain{Name: chainSteering, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	to := func(port uint16) []expr.Any { return m.dnatTo(port) }
	in := ifnameIn(expr.MetaKeyIIFNAME, steer, false)
	addRules(c, ch,
		concat(in, ipv4(), l4Port(unix.IPPROTO_UDP, 2, dnsPort), to(m.ports.DNS)),
		concat(in, ipv4(), l4Port(unix.IPPROTO_TCP, 2, dnsPort), to(m.ports.DNS)),
		concat(in, ipv4(), l4Port(unix.IPPROTO_TCP, 2, httpPort), to(m.ports.Proxy)),
		concat(in, ipv4(), l4Port(unix.IPPROTO_TCP, 2, httpsPort), to(m.ports.Proxy)),
		concat(ifnameIn(expr.MetaKeyIIFNAME, steerAll, false), ipv4(), l4Proto(unix.IPPROTO_TCP), to(m.ports.Proxy)))
}

// proxyInputRules are the input-chain rules accepting steered connections
// (DNATed to the gateway's proxy ports) from sandbox links.
func (m *Manager) proxyInputRules() [][]expr.Any {
	if m.ports.Proxy == 0 {
		return nil
	}
	links, _, _ := m.sets()
	from := concat(ifnameIn(expr.MetaKeyIIFNAME, links, false), ctBits(expr.CtKeySTATUS, ctDstNAT, expr.CmpOpNeq),
		ipv4(), addrIs(16, m.gateway))
	accept := verdict(expr.VerdictAccept)
	return [][]expr.Any{
		concat(from, l4Port(unix.IPPROTO_TCP, 2, m.ports.Proxy), accept),
		concat(from, l4Port(unix.IPPROTO_TCP, 2, m.ports.DNS), accept),
		concat(from, l4Port(unix.IPPROTO_UDP, 2, m.ports.DNS), accept),
	}
}

// dnatTo rewrites the destination to the gateway address and port.
func (m *Manager) dnatTo(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: reg1, Data: m.gateway.AsSlice()},
		&expr.Immediate{Register: reg2, Data: binary.BigEndian.AppendUint16(nil, port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: reg1, RegProtoMin: reg2, Specified: true},
	}
}

// ifnameAddrIn matches "<key> . ip daddr/saddr (network header offset off)" in set.
func ifnameAddrIn(key expr.MetaKey, off uint32, set *nftables.Set) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: reg1},
		&expr.Payload{DestRegister: reg2, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Lookup{SourceRegister: reg1, SetName: set.Name, SetID: set.ID}}
}

// addrIs matches the IPv4 address at network header offset off (12: source, 16: destination).
func addrIs(off uint32, a netip.Addr) []expr.Any {
	return []expr.Any{&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: a.AsSlice()}}
}

// l4Proto matches meta l4proto proto.
func l4Proto(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{proto}}}
}

// l4Port matches meta l4proto proto and the 2-byte transport header field at
// off (0: source port, 2: destination port) equal to port.
func l4Port(proto byte, off uint32, port uint16) []expr.Any {
	return append(l4Proto(proto),
		&expr.Payload{DestRegister: reg1, Base: expr.PayloadBaseTransportHeader, Offset: off, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: binary.BigEndian.AppendUint16(nil, port)})
}

// AttachEgress gives the egress proxy its own network, afresh: the network of
// EgressID (a netns with a routed link, in the firewall's link sets like a
// sandbox's, never restricted) is detached if left over and attached again.
func (m *Manager) AttachEgress(ctx context.Context) (Attachment, error) {
	if err := m.Detach(ctx, EgressID); err != nil {
		return Attachment{}, err
	}
	return m.Attach(ctx, EgressID)
}
