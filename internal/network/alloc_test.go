package network

import (
	"net/netip"
	"testing"
)

func TestAllocator(t *testing.T) {
	p := netip.MustParsePrefix("10.9.9.0/29") // hosts .1-.6, gateway .1
	a := newAllocator(p, p.Addr().Next())
	var got []netip.Addr
	for i := range 5 {
		addr, ok := a.take(string(rune('a' + i)))
		if !ok {
			t.Fatalf("take %d failed", i)
		}
		got = append(got, addr)
	}
	want := []string{"10.9.9.2", "10.9.9.3", "10.9.9.4", "10.9.9.5", "10.9.9.6"}
	for i, w := range want {
		if got[i].String() != w {
			t.Fatalf("take order %v, want %v", got, want)
		}
	}
	if addr, ok := a.take("f"); ok {
		t.Fatalf("take on full subnet gave %s", addr)
	}
	a.release("x", got[1]) // not the owner: no effect
	if _, ok := a.take("f"); ok {
		t.Fatal("release by non-owner freed the address")
	}
	a.release("b", got[1])
	if addr, ok := a.take("f"); !ok || addr != got[1] {
		t.Fatalf("take after release = %s, %v; want %s", addr, ok, got[1])
	}
	for _, s := range []string{"10.9.9.0", "10.9.9.1", "10.9.9.7", "10.9.10.2"} {
		if a.claim("z", netip.MustParseAddr(s)) {
			t.Errorf("claim(%s) accepted a non-assignable address", s)
		}
	}
	if a.claim("z", got[0]) {
		t.Error("claim of an address owned by another id succeeded")
	}
	if !a.claim("a", got[0]) {
		t.Error("re-claim by the owner failed")
	}
}

// TestAllocatorReserveLast: the reserved address goes to its id only, and
// the first sandbox address stays the subnet's second host address (the one
// a sandbox of an older server, which had no reserved address, may hold).
func TestAllocatorReserveLast(t *testing.T) {
	p := netip.MustParsePrefix("10.9.9.0/29") // hosts .1-.6, gateway .1
	a := newAllocator(p, p.Addr().Next())
	if r := a.reserveLast("_e"); r.String() != "10.9.9.6" {
		t.Fatalf("reserved %s, want 10.9.9.6", r)
	}
	if !a.claim("old", netip.MustParseAddr("10.9.9.2")) {
		t.Fatal("claim of .2 refused")
	}
	if a.claim("z", netip.MustParseAddr("10.9.9.6")) {
		t.Fatal("claim of the reserved address accepted for another id")
	}
	if addr, ok := a.takeFixed("_e"); !ok || addr.String() != "10.9.9.6" {
		t.Fatalf("takeFixed = %s %v", addr, ok)
	}
	for i := range 3 {
		if addr, ok := a.take(string(rune('a' + i))); !ok || addr.String() == "10.9.9.6" {
			t.Fatalf("take %d = %s %v", i, addr, ok)
		}
	}
	if addr, ok := a.take("f"); ok {
		t.Fatalf("take on full subnet gave %s", addr)
	}
	if _, ok := a.takeFixed("f"); ok {
		t.Fatal("takeFixed for an id without a reservation")
	}
}

func TestAllocatorSkipsRecentlyReleased(t *testing.T) {
	p := netip.MustParsePrefix("10.9.0.0/24")
	a := newAllocator(p, p.Addr().Next())
	x, _ := a.take("x")
	a.release("x", x)
	y, _ := a.take("y")
	if y == x {
		t.Fatalf("released address %s reused immediately", x)
	}
}

func TestNormalizeAndNames(t *testing.T) {
	cfg, err := normalize(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Bridge != "cubby0" || cfg.Table != "cubby_cubby0" || cfg.NetnsDir != "/run/netns" || cfg.Prefix != "cubby-" || cfg.Subnet != DefaultSubnet {
		t.Fatalf("defaults: %+v", cfg)
	}
	bad := []Config{
		{Bridge: "a-very-long-bridge-name"},
		{Subnet: netip.MustParsePrefix("fd00::/64")},
		{Subnet: netip.MustParsePrefix("10.0.0.0/31")},
		{Prefix: "a/b"},
		{NetnsDir: "relative"},
	}
	for _, c := range bad {
		if _, err := normalize(c); err == nil {
			t.Errorf("normalize(%+v) accepted", c)
		}
	}
	m := &Manager{cfg: cfg}
	n1, n2 := m.vethName("abcdefghijklmnopqrst"), m.vethName("abcdefghijklmnopqrsu")
	if len(n1) != 15 || n1 == n2 || n1[:5] != "cubby" {
		t.Fatalf("veth names %q %q", n1, n2)
	}
	if err := validIfname(n1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "a/b", "..", "a b"} {
		if validID(id) == nil {
			t.Errorf("validID(%q) accepted", id)
		}
	}
}
