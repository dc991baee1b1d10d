package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// pipInCell runs `!pip install` in a code-interpreter cell (the first
// example of E2B's code-interpreter README) and returns the cell's output.
func pipInCell(t *testing.T, ts *testserver.Server) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	url := "http://" + ts.Addr
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{Template: "code-interpreter",
		ConnectionOptions: sdk.ConnectionOptions{APIKey: ts.Key, APIURL: url, SandboxURL: url, RequestTimeout: 3 * time.Minute}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, ts.Log())
	}
	defer sbx.Kill(context.Background())
	exec, err := sbx.RunCode(ctx, "!pip install --no-cache-dir --disable-pip-version-check cowsay==6.1 2>&1 | tail -3\n"+
		"import importlib.util; print('cowsay' if importlib.util.find_spec('cowsay') else 'no cowsay')", nil)
	if err != nil {
		t.Fatalf("run code: %v", err)
	}
	return strings.Join(exec.Logs.Stdout, "") + strings.Join(exec.Logs.Stderr, "")
}

// TestSandboxOutboundSetting: behind a TLS-intercepting gateway (this host's
// way out) pip in a sandbox cannot verify PyPI; with --sandbox-outbound the
// server passes the host's CA bundle (and proxy variables) to sandboxes and
// `!pip install` works in a code-interpreter cell, against the real PyPI.
func TestSandboxOutboundSetting(t *testing.T) {
	plain := testserver.Start(t, testserver.Options{BridgePrefix: "cbeg"})
	out := pipInCell(t, plain)
	if strings.Contains(out, "Successfully installed") {
		t.Logf("pip works here without --sandbox-outbound (no intercepting gateway): %q", out)
	}
	plain.Stop()
	withCA := testserver.Start(t, testserver.Options{BridgePrefix: "cbeg", Args: []string{"--sandbox-outbound"}})
	out = pipInCell(t, withCA)
	if !strings.Contains(out, "Successfully installed cowsay-6.1") || !strings.HasSuffix(strings.TrimSpace(out), "cowsay") {
		t.Fatalf("!pip install with --sandbox-outbound: %q", out)
	}
}
