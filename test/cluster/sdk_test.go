package cluster

import (
	"testing"

	"github.com/cubby-dev/cubby/internal/testenv/testsdk"
)

// TestOfficialSDKs: the official E2B SDKs (JS and Python, unchanged,
// configured only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY) create a
// code-interpreter sandbox through a replica, run a command, write and read
// a file, get a chart from runCode and kill it; then the same through the
// second replica. The scripts are internal/testenv/testsdk/js/sdk.mjs and
// internal/testenv/testsdk/python/sdk_check.py.
func TestOfficialSDKs(t *testing.T) {
	f := nodeFleet(t, 2)
	kit := testsdk.Install(t)
	for _, r := range f.replicas {
		env := testsdk.Env(r.URL(""), f.key)
		kit.RunJS(t, "JS through "+r.Name, env, "sdk.mjs")
		kit.RunPython(t, "Python through "+r.Name, env, "sdk_check.py")
	}
}
