package network

import (
	"encoding/binary"
	"net/netip"
)

// allocator hands out IPv4 host addresses of a subnet, never the network
// address, the broadcast address or the gateway. It continues after the last
// address handed out, so a just-released address is reused as late as possible
// (stale ARP and conntrack entries age out first). Not safe for concurrent use.
type allocator struct {
	first, last uint32 // first and last assignable host address
	gw          uint32
	next        uint32
	used        map[netip.Addr]string // address -> sandbox id
	fixed       map[string]netip.Addr // id -> the address reserveLast set apart for it
}

func newAllocator(subnet netip.Prefix, gw netip.Addr) *allocator {
	base := u32(subnet.Masked().Addr())
	size := uint32(1) << (32 - subnet.Bits())
	return &allocator{
		first: base + 1,
		last:  base + size - 2,
		gw:    u32(gw),
		next:  base + 1,
		used:  make(map[netip.Addr]string),
		fixed: make(map[string]netip.Addr),
	}
}

// reserveLast sets the last assignable address apart for id alone: take and
// claim never give it to another id, and takeFixed gives it to id. A network
// every server start creates anew (the egress proxy's) then never takes the
// address of a sandbox to be adopted, whatever order they come in and
// whichever server version started that sandbox.
func (a *allocator) reserveLast(id string) netip.Addr {
	addr := addr4(a.last)
	a.last--
	if a.next > a.last {
		a.next = a.first
	}
	a.fixed[id] = addr
	return addr
}

// takeFixed records id's reserved address as used and returns it; ok is
// false when id has none.
func (a *allocator) takeFixed(id string) (netip.Addr, bool) {
	addr, ok := a.fixed[id]
	if ok {
		a.used[addr] = id
	}
	return addr, ok
}

// assignable reports whether a is a host address of the subnet other than the gateway.
func (a *allocator) assignable(addr netip.Addr) bool {
	if !addr.Is4() {
		return false
	}
	v := u32(addr)
	return v >= a.first && v <= a.last && v != a.gw
}

// take allocates the next free address for id; ok is false when the subnet is full.
func (a *allocator) take(id string) (netip.Addr, bool) {
	n := a.last - a.first + 1
	for i := uint32(0); i < n; i++ {
		v := a.next
		a.next++
		if a.next > a.last {
			a.next = a.first
		}
		addr := addr4(v)
		if v == a.gw {
			continue
		}
		if _, busy := a.used[addr]; busy {
			continue
		}
		a.used[addr] = id
		return addr, true
	}
	return netip.Addr{}, false
}

// claim records addr as used by id; it fails if addr is not assignable or used by another id.
func (a *allocator) claim(id string, addr netip.Addr) bool {
	if !a.assignable(addr) {
		return false
	}
	if owner, busy := a.used[addr]; busy && owner != id {
		return false
	}
	a.used[addr] = id
	return true
}

// release frees addr if id holds it.
func (a *allocator) release(id string, addr netip.Addr) {
	if a.used[addr] == id {
		delete(a.used, addr)
	}
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func addr4(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}
