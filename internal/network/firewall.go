package network

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Names of the objects inside the Manager's nftables table.
const (
	setLinks      = "links"  // ifname: host links of this Manager's sandboxes
	setOwn        = "own"    // ifname . ipv4_addr: each link with its sandbox's address
	setNoInternet = "noinet" // ifname: links of sandboxes without internet access
	chainReject   = "reject" // regular chain: TCP RST, else ICMP(v6) admin-prohibited
	chainIngress  = "ingress"
	chainForward  = "forward"
	chainInput    = "input"
	chainEgress   = "egress"
	chainPostNAT  = "postrouting"
)

// Registers of nf_tables expressions: NFT_REG_1 holds an interface name (16
// bytes), NFT_REG_2 (the 16 bytes after it) the IPv4 address that follows it in
// an "ifname . ipv4_addr" key.
const (
	reg1 = 1
	reg2 = 2
)

// ctDstNAT is IPS_DST_NAT from linux/netfilter/nf_conntrack_common.h.
const ctDstNAT = 1 << 5

func (m *Manager) table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: m.cfg.Table}
}

// sets returns the table's sets (IDs are unique within one transaction).
func (m *Manager) sets() (links, own, noinet *nftables.Set) {
	t := m.table()
	return &nftables.Set{Table: t, ID: 1, Name: setLinks, KeyType: nftables.TypeIFName},
		&nftables.Set{Table: t, ID: 2, Name: setOwn, Concatenation: true,
			KeyType: nftables.MustConcatSetType(nftables.TypeIFName, nftables.TypeIPAddr)},
		&nftables.Set{Table: t, ID: 3, Name: setNoInternet, KeyType: nftables.TypeIFName}
}

// ifnameKey is an interface name as an nf_tables key: IFNAMSIZ bytes, NUL padded.
func ifnameKey(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// ownKey is the "ifname . ipv4_addr" key of a link and its sandbox's address.
func ownKey(name string, addr netip.Addr) []byte {
	return append(ifnameKey(name), addr.AsSlice()...)
}

// keyIfname returns the interface name at the start of a set key.
func keyIfname(key []byte) string {
	if len(key) > unix.IFNAMSIZ {
		key = key[:unix.IFNAMSIZ]
	}
	return string(bytes.TrimRight(key, "\x00"))
}

// tableExists reports whether the Manager's inet table exists.
func (m *Manager) tableExists(c *nftables.Conn) (bool, error) {
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("list nft tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == m.cfg.Table {
			return true, nil
		}
	}
	return false, nil
}

// elements returns the members of set name, or nil when the table or the set
// does not exist or the set has another key layout (a table of an older
// version, rebuilt empty).
func (m *Manager) elements(c *nftables.Conn, want *nftables.Set) ([]nftables.SetElement, error) {
	ok, err := m.tableExists(c)
	if err != nil || !ok {
		return nil, err
	}
	set, err := c.GetSetByName(m.table(), want.Name)
	if err != nil || set.KeyType.Bytes != want.KeyType.Bytes {
		return nil, nil
	}
	elems, err := c.GetSetElements(set)
	if err != nil {
		return nil, fmt.Errorf("list nft set %s: %w", want.Name, err)
	}
	return elems, nil
}

// applyFirewall (re)creates the table atomically in one nf_tables transaction,
// carrying over the members of its sets. Layout (nft syntax; BR is the bridge):
//
//	set links { type ifname }; set own { type ifname . ipv4_addr }; set noinet { type ifname }
//	chain reject { meta l4proto tcp reject with tcp reset; reject with icmpx admin-prohibited }
//	chain ingress { type filter hook prerouting priority raw; policy accept;   # before conntrack
//	  iifname @links meta nfproto != ipv4 drop                        # IPv6 from a sandbox
//	  iifname @links iifname . ip saddr != @own drop }                # forged source address
//	chain forward { type filter hook forward priority filter; policy accept;
//	  iifname @links oifname @links jump reject                       # sandbox <-> sandbox
//	  oifname BR jump reject                                          # subnet address with no sandbox
//	  iifname @noinet jump reject                                     # internet access disabled
//	  iifname != @links oifname @links ct state new ct status != dnat jump reject }  # unsolicited inbound
//	chain input { type filter hook input priority filter; policy accept;
//	  iifname @links ct state established,related accept
//	  iifname @links jump reject }                                    # sandbox -> host services
//	chain egress { type filter hook postrouting priority filter; policy accept;
//	  oifname @links meta nfproto != ipv4 drop
//	  oifname @links oifname . ip daddr != @own drop }                # a link carries only its sandbox's address
//	chain postrouting { type nat hook postrouting priority srcnat;
//	  iifname @links oifname != @links masquerade }
//
// Masquerading keys on the interface the packet came in on, not on its source
// address: for forwarded packets the kernel hands the input device to the
// postrouting hook (ip_output passes skb->dev as the hook's input device), so
// iifname needs no packet mark there.
func (m *Manager) applyFirewall() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	sets := m.allSets()
	keep := map[string][]nftables.SetElement{}
	for _, set := range sets {
		if keep[set.Name], err = m.elements(c, set); err != nil {
			return err
		}
	}
	t := m.table()
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	for _, set := range sets {
		if err := c.AddSet(set, keep[set.Name]); err != nil {
			return fmt.Errorf("nft set %s: %w", set.Name, err)
		}
	}
	m.addRejectChain(c, t)
	m.addLinkCheckChain(c, t, chainIngress, nftables.ChainHookPrerouting, nftables.ChainPriorityRaw, expr.MetaKeyIIFNAME, 12)
	m.addForwardChain(c, t)
	m.addInputChain(c, t)
	m.addLinkCheckChain(c, t, chainEgress, nftables.ChainHookPostrouting, nftables.ChainPriorityFilter, expr.MetaKeyOIFNAME, 16)
	m.addNATChain(c, t)
	m.addSteeringChain(c, t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("apply nft table %s: %w", m.cfg.Table, err)
	}
	m.noinet = make(map[string]bool, len(keep[setNoInternet]))
	for _, e := range keep[setNoInternet] {
		m.noinet[keyIfname(e.Key)] = true
	}
	return nil
}

func (m *Manager) addRejectChain(c *nftables.Conn, t *nftables.Table) {
	ch := c.AddChain(&nftables.Chain{Name: chainReject, Table: t})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Reject{Type: unix.NFT_REJECT_TCP_RST},
	}})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{
		&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED},
	}})
}

// baseChain adds a base chain with policy accept at hook and priority.
func baseChain(c *nftables.Conn, t *nftables.Table, name string, typ nftables.ChainType,
	hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio, Policy: &accept})
}

// addRules adds one rule per expression list to ch.
func addRules(c *nftables.Conn, ch *nftables.Chain, rules ...[]expr.Any) {
	for _, r := range rules {
		c.AddRule(&nftables.Rule{Table: ch.Table, Chain: ch, Exprs: r})
	}
}

// addLinkCheckChain adds chain name at hook, which drops what a sandbox link
// carries (key: iifname on the way in, oifname on the way out) unless it is
// IPv4 with the link's own sandbox address at network header offset off (12:
// source, 16: destination).
func (m *Manager) addLinkCheckChain(c *nftables.Conn, t *nftables.Table, name string, hook *nftables.ChainHook,
	prio *nftables.ChainPriority, key expr.MetaKey, off uint32) {
	links, own, _ := m.sets()
	ch := baseChain(c, t, name, nftables.ChainTypeFilter, hook, prio)
	link := ifnameIn(key, links, false)
	addRules(c, ch,
		concat(link, notIPv4(), verdict(expr.VerdictDrop)),
		concat(link, ipv4(), ifnameAddrNotIn(key, off, own), verdict(expr.VerdictDrop)))
}

func (m *Manager) addForwardChain(c *nftables.Conn, t *nftables.Table) {
	links, _, noinet := m.sets()
	ch := baseChain(c, t, chainForward, nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	reject := jump(chainReject)
	addRules(c, ch,
		concat(ifnameIn(expr.MetaKeyIIFNAME, links, false), ifnameIn(expr.MetaKeyOIFNAME, links, false), reject),
		concat(ifname(expr.MetaKeyOIFNAME, expr.CmpOpEq, m.cfg.Bridge), reject),
		concat(ifnameIn(expr.MetaKeyIIFNAME, noinet, false), reject),
		concat(ifnameIn(expr.MetaKeyIIFNAME, links, true), ifnameIn(expr.MetaKeyOIFNAME, links, false),
			ctBits(expr.CtKeySTATE, expr.CtStateBitNEW, expr.CmpOpNeq), ctBits(expr.CtKeySTATUS, ctDstNAT, expr.CmpOpEq), reject))
	m.addPolicyRules(c, ch)
}

func (m *Manager) addInputChain(c *nftables.Conn, t *nftables.Table) {
	links, _, _ := m.sets()
	ch := baseChain(c, t, chainInput, nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	from := ifnameIn(expr.MetaKeyIIFNAME, links, false)
	addRules(c, ch, concat(from, ctBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED, expr.CmpOpNeq),
		verdict(expr.VerdictAccept)))
	addRules(c, ch, m.proxyInputRules()...)
	addRules(c, ch, concat(from, jump(chainReject)))
}

func (m *Manager) addNATChain(c *nftables.Conn, t *nftables.Table) {
	links, _, _ := m.sets()
	ch := c.AddChain(&nftables.Chain{Name: chainPostNAT, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	addRules(c, ch, concat(ifnameIn(expr.MetaKeyIIFNAME, links, false), ifnameIn(expr.MetaKeyOIFNAME, links, true),
		[]expr.Any{&expr.Masq{}}))
}

// register adds link name with its sandbox's address to the sets links and
// own in one transaction; with clearNoInet it also removes the name from
// noinet (adding it first, so a missing element is no error). Called with m.mu
// held.
func (m *Manager) register(name string, addr netip.Addr, clearNoInet bool) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	links, own, noinet := m.sets()
	key := []nftables.SetElement{{Key: ifnameKey(name)}}
	if err := c.SetAddElements(links, key); err != nil {
		return err
	}
	if err := c.SetAddElements(own, []nftables.SetElement{{Key: ownKey(name, addr)}}); err != nil {
		return err
	}
	if clearNoInet && (m.noinet == nil || m.noinet[name]) {
		if err := addThenDelete(c, noinet, key); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("register %s (%s) in nft table %s: %w", name, addr, m.cfg.Table, err)
	}
	if clearNoInet && m.noinet != nil {
		delete(m.noinet, name)
	}
	return nil
}

// unregister removes link name from every set: from own with addr, or, when
// addr is not valid, every element naming the link. Missing elements are not
// errors. Called with m.mu held.
func (m *Manager) unregister(name string, addr netip.Addr) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	links, own, noinet := m.sets()
	key := []nftables.SetElement{{Key: ifnameKey(name)}}
	ownKeys := []nftables.SetElement{{Key: ownKey(name, addr)}}
	if !addr.IsValid() {
		elems, err := m.elements(c, own)
		if err != nil {
			return err
		}
		ownKeys = nil
		for _, e := range elems {
			if keyIfname(e.Key) == name {
				ownKeys = append(ownKeys, nftables.SetElement{Key: e.Key})
			}
		}
	}
	for _, op := range []struct {
		set   *nftables.Set
		elems []nftables.SetElement
	}{{links, key}, {noinet, key}, {own, ownKeys}} {
		if err := addThenDelete(c, op.set, op.elems); err != nil {
			return err
		}
	}
	if err := m.clearEgress(c, name); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("unregister %s from nft table %s: %w", name, m.cfg.Table, err)
	}
	if m.noinet != nil {
		delete(m.noinet, name)
	}
	return nil
}

// addThenDelete queues the removal of elems from set, preceded by their
// addition so that elements already missing do not fail the transaction.
func addThenDelete(c *nftables.Conn, set *nftables.Set, elems []nftables.SetElement) error {
	if len(elems) == 0 {
		return nil
	}
	if err := c.SetAddElements(set, elems); err != nil {
		return err
	}
	return c.SetDeleteElements(set, elems)
}

// setInternet adds link name to the no-internet set (allowed=false) or removes
// it (allowed=true); a missing element is not an error. When the in-memory
// mirror of the set (loaded by Setup) says nothing changes, no nf_tables
// transaction is made: a commit costs 2-18 ms on a loaded host. Called with
// m.mu held.
func (m *Manager) setInternet(name string, allowed bool) error {
	if m.noinet != nil && m.noinet[name] == !allowed {
		return nil
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	_, _, set := m.sets()
	elem := []nftables.SetElement{{Key: ifnameKey(name)}}
	if allowed {
		err = addThenDelete(c, set, elem)
	} else {
		err = c.SetAddElements(set, elem)
	}
	if err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("update nft set %s/%s for %s: %w", m.cfg.Table, setNoInternet, name, err)
	}
	if m.noinet != nil {
		if allowed {
			delete(m.noinet, name)
		} else {
			m.noinet[name] = true
		}
	}
	return nil
}

// pruneSets removes set elements whose link belongs to no sandbox the Manager
// tracks. Called with m.mu held.
func (m *Manager) pruneSets() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	held := make(map[string]bool, len(m.sbx))
	for id := range m.sbx {
		held[m.vethName(id)] = true
	}
	var stale []string
	for _, set := range m.allSets() {
		elems, err := m.elements(c, set)
		if err != nil {
			return err
		}
		var drop []nftables.SetElement
		for _, e := range elems {
			if name := keyIfname(e.Key); !held[name] {
				drop = append(drop, nftables.SetElement{Key: e.Key, KeyEnd: e.KeyEnd})
				stale = append(stale, name)
			}
		}
		if len(drop) > 0 {
			if err := c.SetDeleteElements(set, drop); err != nil {
				return err
			}
		}
	}
	if len(stale) == 0 {
		return nil
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("prune nft sets of %s: %w", m.cfg.Table, err)
	}
	for _, name := range stale {
		delete(m.noinet, name)
	}
	return nil
}

// deleteTable removes the Manager's table; a missing table is not an error.
func (m *Manager) deleteTable() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	ok, err := m.tableExists(c)
	if err != nil || !ok {
		return err
	}
	c.DelTable(m.table())
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("delete nft table %s: %w", m.cfg.Table, err)
	}
	m.noinet = nil
	return nil
}

func concat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// ifname matches meta iifname/oifname against name (IFNAMSIZ bytes, NUL padded).
func ifname(key expr.MetaKey, op expr.CmpOp, name string) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: reg1}, &expr.Cmp{Op: op, Register: reg1, Data: ifnameKey(name)}}
}

// ifnameIn matches meta iifname/oifname in set (not in it, with invert).
func ifnameIn(key expr.MetaKey, set *nftables.Set, invert bool) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: reg1},
		&expr.Lookup{SourceRegister: reg1, SetName: set.Name, SetID: set.ID, Invert: invert}}
}

// ifnameAddrNotIn matches "<key> . <IPv4 address at network header offset off>"
// not in the concatenated set (off 12: source, 16: destination).
func ifnameAddrNotIn(key expr.MetaKey, off uint32, set *nftables.Set) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: reg1},
		&expr.Payload{DestRegister: reg2, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4},
		&expr.Lookup{SourceRegister: reg1, SetName: set.Name, SetID: set.ID, Invert: true}}
}

// ipv4 matches meta nfproto ipv4 (needed before IPv4 header payloads in an inet table).
func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: reg1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

// notIPv4 matches meta nfproto != ipv4.
func notIPv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: reg1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: reg1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

// ctBits matches (ct key & bits) op 0, e.g. "ct state new" is (state & NEW) != 0.
func ctBits(key expr.CtKey, bits uint32, op expr.CmpOp) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: key},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(bits), Xor: make([]byte, 4)},
		&expr.Cmp{Op: op, Register: 1, Data: make([]byte, 4)},
	}
}

func jump(chain string) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}
}

func verdict(kind expr.VerdictKind) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: kind}}
}
