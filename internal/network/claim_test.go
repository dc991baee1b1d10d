package network

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestClaim checks that a second server cannot take a bridge a live one holds
// nor a subnet that overlaps another bridge's, and that a stopped server's
// bridge is reused (its stale address removed) and reported by Leaks until
// torn down, and that a restarted server adopts its kept sandboxes' routes.
func TestClaim(t *testing.T) {
	requireRoot(t)
	locks := t.TempDir()
	sfx := randSuffix(t)
	cfg := Config{Bridge: "cbc" + sfx, Subnet: freePrefix(t, 24), Prefix: "cbc" + sfx + "-", LockDir: locks}
	first := newManagerNoSetup(t, cfg)
	if err := first.Setup(context.Background()); err != nil {
		t.Fatalf("Setup: %v", err)
	}

	other := freePrefix(t, 24)
	same := cfg
	same.Subnet = other
	err := newManagerNoSetup(t, same).Setup(context.Background())
	if !errors.Is(err, ErrBridgeInUse) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second server on the bridge: %v, want ErrBridgeInUse naming pid %d", err, os.Getpid())
	}

	sfx2 := randSuffix(t)
	overlap := Config{Bridge: "cbc" + sfx2, Subnet: netip.PrefixFrom(cfg.Subnet.Addr(), 25), // inside the first server's subnet only
		Prefix: "cbc" + sfx2 + "-", LockDir: locks}
	err = newManagerNoSetup(t, overlap).Setup(context.Background())
	if !errors.Is(err, ErrSubnetConflict) || !strings.Contains(err.Error(), cfg.Bridge) {
		t.Fatalf("overlapping subnet: %v, want ErrSubnetConflict naming %s", err, cfg.Bridge)
	}
	if _, err := netlink.LinkByName(overlap.Bridge); err == nil {
		t.Fatalf("a refused server created its bridge %s", overlap.Bridge)
	}

	// The first server stops without tearing down, keeping a sandbox's link and
	// its /32 route: a restart on the same bridge and subnet adopts them.
	if _, err := first.Attach(context.Background(), "kept"); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	first.Close()
	restart := newManagerNoSetup(t, cfg)
	if err := restart.Setup(context.Background()); err != nil {
		t.Fatalf("Setup of a restarted server with a kept sandbox: %v", err)
	}
	restart.Close()

	// Its network is a leak, and a new server on the bridge reuses it with
	// another subnet.
	leaks, err := Leaks(locks)
	if err != nil || !contains(leaks, "bridge "+cfg.Bridge) || !contains(leaks, "nftables table inet cubby_"+cfg.Bridge) {
		t.Fatalf("Leaks = %v, %v; want the stopped server's bridge and table", leaks, err)
	}
	again := newManagerNoSetup(t, same)
	if err := again.Setup(context.Background()); err != nil {
		t.Fatalf("Setup on a stopped server's bridge: %v", err)
	}
	br, _ := netlink.LinkByName(cfg.Bridge)
	addrs, _ := netlink.AddrList(br, netlink.FAMILY_V4)
	if len(addrs) != 1 || !other.Contains(netip.MustParseAddr(addrs[0].IP.String())) {
		t.Fatalf("bridge addresses %v, want only one in %s", addrs, other)
	}
	if leaks, _ := Leaks(locks); contains(leaks, "bridge "+cfg.Bridge) {
		t.Fatalf("a held bridge is reported as a leak: %v", leaks)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestWholeRetriesInterruptedDumps checks that an interrupted netlink dump is
// listed again, and that one interrupted every time ends in the error.
func TestWholeRetriesInterruptedDumps(t *testing.T) {
	calls := 0
	got, err := whole(func() ([]int, error) {
		calls++
		if calls < 3 {
			return []int{1}, netlink.ErrDumpInterrupted
		}
		return []int{1, 2}, nil
	})
	if err != nil || len(got) != 2 || calls != 3 {
		t.Fatalf("whole = %v, %v after %d calls; want [1 2] after 3", got, err, calls)
	}
	calls = 0
	_, err = whole(func() ([]int, error) { calls++; return nil, netlink.ErrDumpInterrupted })
	if !errors.Is(err, netlink.ErrDumpInterrupted) || calls != dumpTries {
		t.Fatalf("always interrupted: %v after %d calls, want ErrDumpInterrupted after %d", err, calls, dumpTries)
	}
}
