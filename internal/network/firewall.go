package network

import (
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
	setNoInternet = "noinet" // ipv4_addr set: sandboxes without internet access
	chainReject   = "reject" // regular chain: TCP RST, else ICMP(v6) admin-prohibited
	chainForward  = "forward"
	chainInput    = "input"
	chainPostNAT  = "postrouting"
)

// ctDstNAT is IPS_DST_NAT from linux/netfilter/nf_conntrack_common.h.
const ctDstNAT = 1 << 5

func (m *Manager) table() *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: m.cfg.Table}
}

func (m *Manager) noInetSet() *nftables.Set {
	return &nftables.Set{Table: m.table(), ID: 1, Name: setNoInternet, KeyType: nftables.TypeIPAddr}
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

// noInetElements returns the current members of the no-internet set, or nil
// when the table does not exist yet.
func (m *Manager) noInetElements(c *nftables.Conn) ([]nftables.SetElement, error) {
	ok, err := m.tableExists(c)
	if err != nil || !ok {
		return nil, err
	}
	set, err := c.GetSetByName(m.table(), setNoInternet)
	if err != nil {
		return nil, nil // table from an older layout: rebuild with an empty set
	}
	elems, err := c.GetSetElements(set)
	if err != nil {
		return nil, fmt.Errorf("list nft set %s: %w", setNoInternet, err)
	}
	return elems, nil
}

// applyFirewall (re)creates the table atomically in one nf_tables transaction,
// carrying over the members of the no-internet set. Layout (nft syntax):
//
//	chain reject { meta l4proto tcp reject with tcp reset; reject with icmpx admin-prohibited }
//	chain forward { type filter hook forward priority filter; policy accept;
//	  iifname BR oifname BR jump reject                       # sandbox <-> sandbox
//	  iifname BR ip saddr @noinet jump reject                 # internet access disabled
//	  iifname != BR oifname BR ct state new ct status != dnat jump reject }  # unsolicited inbound
//	chain input { type filter hook input priority filter; policy accept;
//	  iifname BR ct state established,related accept
//	  iifname BR jump reject }                                # sandbox -> host services
//	chain postrouting { type nat hook postrouting priority srcnat;
//	  ip saddr SUBNET oifname != BR masquerade }
func (m *Manager) applyFirewall() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	keep, err := m.noInetElements(c)
	if err != nil {
		return err
	}
	t := m.table()
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	if err := c.AddSet(m.noInetSet(), keep); err != nil {
		return fmt.Errorf("nft set %s: %w", setNoInternet, err)
	}
	m.addRejectChain(c, t)
	m.addForwardChain(c, t)
	m.addInputChain(c, t)
	m.addNATChain(c, t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("apply nft table %s: %w", m.cfg.Table, err)
	}
	m.noinet = make(map[netip.Addr]bool, len(keep))
	for _, e := range keep {
		if a, ok := netip.AddrFromSlice(e.Key); ok {
			m.noinet[a] = true
		}
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

func (m *Manager) addForwardChain(c *nftables.Conn, t *nftables.Table) {
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: chainForward, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	br := m.cfg.Bridge
	rule := func(exprs ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(append(exprs, jump(chainReject))...)})
	}
	rule(ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, br), ifname(expr.MetaKeyOIFNAME, expr.CmpOpEq, br))
	rule(ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, br), ipv4(), saddrInSet(m.noInetSet()))
	rule(ifname(expr.MetaKeyIIFNAME, expr.CmpOpNeq, br), ifname(expr.MetaKeyOIFNAME, expr.CmpOpEq, br),
		ctBits(expr.CtKeySTATE, expr.CtStateBitNEW, expr.CmpOpNeq), ctBits(expr.CtKeySTATUS, ctDstNAT, expr.CmpOpEq))
}

func (m *Manager) addInputChain(c *nftables.Conn, t *nftables.Table) {
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Name: chainInput, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	fromBr := ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq, m.cfg.Bridge)
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(fromBr,
		ctBits(expr.CtKeySTATE, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED, expr.CmpOpNeq),
		[]expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}})})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(fromBr, jump(chainReject))})
}

func (m *Manager) addNATChain(c *nftables.Conn, t *nftables.Table) {
	ch := c.AddChain(&nftables.Chain{Name: chainPostNAT, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: concat(ipv4(), saddrIn(m.cfg.Subnet),
		ifname(expr.MetaKeyOIFNAME, expr.CmpOpNeq, m.cfg.Bridge), []expr.Any{&expr.Masq{}})})
}

// setInternet adds addr to the no-internet set (allowed=false) or removes it
// (allowed=true). Removal is made idempotent by adding first in the same
// transaction, so a missing element is not an error. When the in-memory
// mirror of the set (loaded by Setup) says nothing changes, no nf_tables
// transaction is made: a commit costs 2-18 ms on a loaded host. Called with
// m.mu held.
func (m *Manager) setInternet(addr netip.Addr, allowed bool) error {
	if m.noinet != nil && m.noinet[addr] == !allowed {
		return nil
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	set := m.noInetSet()
	elem := []nftables.SetElement{{Key: addr.AsSlice()}}
	if err := c.SetAddElements(set, elem); err != nil {
		return err
	}
	if allowed {
		if err := c.SetDeleteElements(set, elem); err != nil {
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("update nft set %s/%s for %s: %w", m.cfg.Table, setNoInternet, addr, err)
	}
	if m.noinet != nil {
		if allowed {
			delete(m.noinet, addr)
		} else {
			m.noinet[addr] = true
		}
	}
	return nil
}

// pruneNoInternet removes set members that are not allocated to any sandbox.
// Called with m.mu held.
func (m *Manager) pruneNoInternet() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	elems, err := m.noInetElements(c)
	if err != nil {
		return err
	}
	var stale []nftables.SetElement
	for _, e := range elems {
		addr, ok := netip.AddrFromSlice(e.Key)
		if _, used := m.alloc.used[addr]; ok && !used {
			stale = append(stale, nftables.SetElement{Key: e.Key})
		}
	}
	if len(stale) == 0 {
		return nil
	}
	if err := c.SetDeleteElements(m.noInetSet(), stale); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("prune nft set %s: %w", setNoInternet, err)
	}
	for _, e := range stale {
		a, _ := netip.AddrFromSlice(e.Key)
		delete(m.noinet, a)
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
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: b}}
}

// ipv4 matches meta nfproto ipv4 (needed before IPv4 header payloads in an inet table).
func ipv4() []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
	}
}

// saddr loads the IPv4 source address (network header offset 12, 4 bytes).
func saddr() expr.Any {
	return &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
}

func saddrInSet(s *nftables.Set) []expr.Any {
	return []expr.Any{saddr(), &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID}}
}

func saddrIn(p netip.Prefix) []expr.Any {
	mask := make([]byte, 4)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{saddr(),
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()},
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
