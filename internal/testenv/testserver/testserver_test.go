package testserver

import (
	"context"
	"os/exec"
	"testing"
)

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
