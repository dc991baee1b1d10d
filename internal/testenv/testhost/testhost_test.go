package testhost

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

func TestFreeSubnetAvoidsHostRoutes(t *testing.T) {
	used, err := usedPrefixes()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range used {
		if u.Bits() == 0 {
			t.Fatalf("used prefixes contain the default route %s: every subnet would clash", u)
		}
	}
	for range 20 {
		s, err := FreeSubnet()
		if err != nil {
			t.Fatal(err)
		}
		p := netip.MustParsePrefix(s)
		if p.Bits() != 24 || !netip.MustParsePrefix("10.0.0.0/8").Contains(p.Addr()) {
			t.Fatalf("FreeSubnet = %s, want a 10.x.y.0/24", s)
		}
		if overlapsAny(p, used) {
			t.Fatalf("FreeSubnet = %s overlaps a host route or address", s)
		}
	}
}

func TestRepoRootHasGoMod(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "testenv", "testhost")); err != nil {
		t.Fatalf("RepoRoot = %s, not this module's root: %v", root, err)
	}
}
