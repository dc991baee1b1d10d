package security

import (
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/sdk"
)

// TestOutboundBundleKeepsEgressCA: with --sandbox-outbound the host's CA
// bundle is mounted in sandboxes and TLS clients are pointed at it; a sandbox
// with header rules must still verify the egress proxy's certificates (the
// server's egress CA) through those same variables, as root and as user, or
// a rule's HTTPS requests fail. The mounted bundle itself stays read-only.
func TestOutboundBundleKeepsEgressCA(t *testing.T) {
	e := startEgress(t, "--sandbox-outbound")
	sbx := e.sandbox(t, &sdk.NetworkOptions{NetworkUpdate: sdk.NetworkUpdate{
		Rules: map[string][]sdk.NetworkRule{"echo.test": {{Headers: map[string]string{"X-Outbound": "checked"}}}}}})
	for _, user := range []string{"root", "user"} {
		r := run(t, sbx, user, `curl -sS -m 10 https://echo.test/headers 2>&1; echo; `+
			`python3 -c "import urllib.request as u; print(u.urlopen('https://echo.test/py').read().decode())" 2>&1`)
		if r.Code != 0 || strings.Count(r.Out, "checked") != 2 {
			t.Fatalf("HTTPS through a header rule as %s with the host bundle: exit %d: %s", user, r.Code, r.Out)
		}
	}
	r := asRoot(t, sbx, `n=$(grep -c BEGIN "$SSL_CERT_FILE"); h=$(grep -c BEGIN /opt/cubby/etc/ca-certificates.crt); echo "$((n-h))"; `+
		`(echo x >> /opt/cubby/etc/ca-certificates.crt) 2>/dev/null && echo writable || echo read-only`)
	if r.Out != "1\nread-only\n" {
		t.Fatalf("the bundle TLS clients use is not the host bundle plus the egress CA, or the host bundle is writable: %q", r.Out)
	}
	e.healthy(t)
}
