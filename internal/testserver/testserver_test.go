package testserver

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
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
	if _, err := os.Stat(filepath.Join(root, "internal", "testserver")); err != nil {
		t.Fatalf("RepoRoot = %s, not this module's root: %v", root, err)
	}
}

// TestLifecycle starts a real server (needs CUBBY_BIN and root), calls the
// API, crashes and restarts it, and checks Stop removes the bridge.
func TestLifecycle(t *testing.T) {
	s := Start(t, Options{})
	ctx := context.Background()
	var list []map[string]any
	if code, err := s.API(ctx, "GET", "/v2/sandboxes", nil, &list); err != nil || code != 200 {
		t.Fatalf("list: %d %v", code, err)
	}
	if _, err := exec.Command("ip", "link", "show", s.Bridge).Output(); err != nil {
		t.Fatalf("bridge %s missing while running: %v", s.Bridge, err)
	}
	s.Kill9()
	if _, err := s.API(ctx, "GET", "/v2/sandboxes", nil, nil); err == nil {
		t.Fatal("API answered after Kill9")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if code, err := s.API(ctx, "GET", "/v2/sandboxes", nil, nil); err != nil || code != 200 {
		t.Fatalf("list after restart: %d %v", code, err)
	}
	s.Stop()
	if err := exec.Command("ip", "link", "show", s.Bridge).Run(); err == nil {
		t.Fatalf("bridge %s still present after Stop", s.Bridge)
	}
	if err := exec.Command("nft", "list", "table", "inet", "cubby_"+s.Bridge).Run(); err == nil {
		t.Fatalf("nft table cubby_%s still present after Stop", s.Bridge)
	}
}
