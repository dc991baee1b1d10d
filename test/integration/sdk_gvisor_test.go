package integration

import (
	"testing"

	"github.com/cubby-dev/cubby/internal/testenv/testsdk"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// TestOfficialSDKsMemorySnapshotGVisor is issue 11's "done when" through the
// official code-interpreter SDKs (JS @e2b/code-interpreter and Python
// e2b-code-interpreter at test/compat's pinned versions, unchanged, configured
// only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY) against
// `cubby serve --runtime runsc`: run_code("x = 42") and a file, a snapshot,
// 3 sandboxes from its ID each with x == 42 and the file under their own ID
// and independent of each other, then fork x5 of the source, the same; all
// killed and the snapshot deleted. The scripts are
// internal/testenv/testsdk/js/memsnap.mjs and
// internal/testenv/testsdk/python/memsnap_check.py; both pinned SDKs have
// fork (sandbox.fork / Sandbox.fork of the core e2b SDK, which the
// code-interpreter Sandbox extends). Needs the npm registry and PyPI.
func TestOfficialSDKsMemorySnapshotGVisor(t *testing.T) {
	runscBin := runscBinary(t)
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbsg",
		Args: []string{"--runtime", "runsc", "--runsc", runscBin}})
	t.Cleanup(func() { releaseNullNetns(t, ts, runscBin) })
	kit := testsdk.Install(t)
	env := testsdk.Env(ts.URL(""), ts.Key)
	t.Run("JS", func(t *testing.T) { kit.RunJS(t, "JS", env, "memsnap.mjs") })
	t.Run("Python", func(t *testing.T) { kit.RunPython(t, "Python", env, "memsnap_check.py") })
	ts.Healthy(t)
}
