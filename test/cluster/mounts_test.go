package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testkube"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// TestNodeHoldsNoHostSandboxDisks: a sandbox of a single-host server running
// when the node tier starts (make test runs the host suites beside it) is
// not held by the node's kubelet: its mount namespace has none of the
// sandbox's mounts, and once the sandbox is killed its loop device is free.
// Before the kubelet's namespace dropped the host's mounts it kept a copy of
// the sandbox's disk mount, and the loop device stayed busy until the node
// stopped.
func TestNodeHoldsNoHostSandboxDisks(t *testing.T) {
	skip(t, testkube.TierNode)
	host := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn := sdk.ConnectionOptions{APIKey: host.Key, APIURL: host.URL(""), SandboxURL: host.URL(""), RequestTimeout: 3 * time.Minute}
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{ConnectionOptions: conn, Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if loops := loopsBelow(t, host.DataDir); len(loops) == 0 {
		t.Fatalf("the sandbox has no loop device below %s: nothing to check", host.DataDir)
	}
	c := testkube.Start(t, testkube.TierNode) // after the sandbox: its namespace starts with the host's mounts
	mounts, err := c.KubeletMounts()
	if err != nil || len(mounts) == 0 {
		t.Fatalf("kubelet mounts: %v, %v", mounts, err)
	}
	for _, m := range mounts {
		for _, dir := range []string{host.DataDir, host.RunDir, "/run/cubby"} {
			if m == dir || strings.HasPrefix(m, dir+"/") {
				t.Errorf("the kubelet's mount namespace holds %s (the host server's %s)", m, dir)
			}
		}
	}
	if err := sbx.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the killed sandbox's loop device to be released", func() bool {
		return len(loopsBelow(t, host.DataDir)) == 0
	})
}

// loopsBelow lists the loop devices whose backing file lies below dir.
func loopsBelow(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		if strings.HasPrefix(strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)"), dir+"/") {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return out
}
