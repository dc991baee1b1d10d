package testserver

import (
	"os/exec"

	"github.com/cubby-dev/cubby/internal/testenv/testhost"
)

// Helpers of package testhost, kept here for the tests that use a server.
var (
	// FreePort is testhost.FreePort.
	FreePort = testhost.FreePort
	// FreeSubnet is testhost.FreeSubnet.
	FreeSubnet = testhost.FreeSubnet
	// RepoRoot is testhost.RepoRoot.
	RepoRoot = testhost.RepoRoot
	// RandHex is testhost.RandHex.
	RandHex = testhost.RandHex
	// ReleaseMounts is testhost.ReleaseMounts.
	ReleaseMounts = testhost.ReleaseMounts
)

// removeHostNetwork deletes the bridge and its nftables table "cubby_"+bridge
// (best effort: either may already be gone).
func removeHostNetwork(bridge string) {
	_ = exec.Command("ip", "link", "del", bridge).Run()
	_ = exec.Command("nft", "delete", "table", "inet", "cubby_"+bridge).Run()
}
