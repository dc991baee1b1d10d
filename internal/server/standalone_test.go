package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/network"
)

// holdBridge takes the lock a server or build holds on bridge in dir, as
// another process would, and returns its release.
func holdBridge(t *testing.T, dir, bridge string) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, bridge+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return func() { f.Close() }
}

// TestSetupWaitsForBridge: a template build whose bridge another process
// holds waits for it (builds on one host queue), and gives up with
// ErrBridgeInUse when its context ends first.
func TestSetupWaitsForBridge(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (creates a bridge)")
	}
	locks := t.TempDir()
	bridge := fmt.Sprintf("cbsw%d", rand.IntN(1e5))
	subnet := netip.MustParsePrefix(fmt.Sprintf("10.232.%d.0/24", rand.IntN(250)))
	newManager := func() *network.Manager {
		nm, err := network.New(network.Config{Bridge: bridge, Subnet: subnet, Prefix: bridge + "-", LockDir: locks}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		return nm
	}
	release := holdBridge(t, locks, bridge)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	nm := newManager()
	if err := setupWaiting(ctx, nm, slog.New(slog.DiscardHandler)); !errors.Is(err, network.ErrBridgeInUse) {
		t.Fatalf("setup while held until the deadline = %v, want ErrBridgeInUse", err)
	}
	nm.Close()

	time.AfterFunc(1500*time.Millisecond, release)
	start := time.Now()
	nm = newManager()
	t.Cleanup(func() { _ = nm.Teardown(context.Background()); nm.Close() })
	if err := setupWaiting(context.Background(), nm, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("setup after the holder let go: %v", err)
	}
	if waited := time.Since(start); waited < 1500*time.Millisecond {
		t.Fatalf("setup returned after %v, before the holder let go", waited)
	}
}
