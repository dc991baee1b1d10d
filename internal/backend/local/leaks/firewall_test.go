package leaks

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/network"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// TestScanFindsFirewallElements attaches a real sandbox network and checks
// that Scan reports its link in the sets links, own and (once its internet
// access is off) noinet, also by address once the link is deleted behind the
// manager's back, and nothing after Detach.
func TestScanFindsFirewallElements(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (netns, nftables)")
	}
	sfx := testserver.RandHex(3)
	subnet, err := testserver.FreeSubnet()
	must(t, err)
	cfg := network.Config{Bridge: "cbl" + sfx, Subnet: netip.MustParsePrefix(subnet), Prefix: "cbl" + sfx + "-",
		NetnsDir: filepath.Join(t.TempDir(), "netns")}
	m, err := network.New(cfg, nil)
	must(t, err)
	ctx := context.Background()
	t.Cleanup(func() {
		_ = m.Sweep(ctx, nil)
		_ = m.Teardown(ctx)
		m.Close()
		_ = unix.Unmount(cfg.NetnsDir, unix.MNT_DETACH) // Setup made it a mount point
	})
	must(t, m.Setup(ctx))
	// A sandbox-like ID: Scan matches processes by it, so a short one would
	// match unrelated command lines (e.g. "lk" in a Go linker's GODEBUG).
	id := "leak" + testserver.RandHex(8)
	att, err := m.Attach(ctx, id)
	must(t, err)
	must(t, m.SetInternetAccess(ctx, id, false))
	o := Options{SandboxesDir: t.TempDir(), NetnsDir: cfg.NetnsDir, NftTable: m.Config().Table}
	r, err := Scan(o, id, netip.Addr{})
	must(t, err)
	if !r.NoInternet || !slices.Equal(r.Firewall, []string{"links", "own"}) || !slices.Equal(r.Veths, []string{att.HostVeth}) {
		t.Fatalf("attached sandbox: %s", r)
	}
	link, err := netlink.LinkByName(att.HostVeth)
	must(t, err)
	must(t, netlink.LinkDel(link))
	if r, err = Scan(o, id, att.Addr); err != nil || !r.NoInternet || len(r.Firewall) != 2 || len(r.Veths) != 0 {
		t.Fatalf("link deleted, set elements left, found by address: %s, %v", r, err)
	}
	must(t, m.Detach(ctx, id))
	if r, err = Scan(o, id, att.Addr); err != nil || !r.Empty() {
		t.Fatalf("after Detach: %s, %v", r, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
