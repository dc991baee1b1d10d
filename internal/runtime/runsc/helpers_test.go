package runsc

import (
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/runtime/oci"
	"github.com/cubby-dev/cubby/internal/runtime/runtimetest"
)

// waitLimit bounds every wait for a condition inside a container.
const waitLimit = 30 * time.Second

// runscBinary returns $CUBBY_RUNSC or the repository's bin/runsc, building it with
// `make runsc` when missing (about 2 min once). It skips the test only when the
// binary cannot be built.
func runscBinary(tb testing.TB) string { return runtimetest.Tool(tb, "runsc", "CUBBY_RUNSC") }

// env adds to the shared test environment the defaults of this package's sandboxes.
type env struct{ *runtimetest.Env[*Runtime] }

type sandbox = runtimetest.Sandbox

func setup(tb testing.TB) *env {
	tb.Helper()
	e := runtimetest.NewEnv(tb, func(tb testing.TB, state string) *Runtime {
		return New(runscBinary(tb), state, Options{}, nil)
	})
	e.CheckProcesses = true
	tb.Cleanup(func() {
		if err := e.RT.ReleaseRoot(); err != nil {
			tb.Error(err)
		}
	})
	return &env{e}
}

// diskBytes is the size of every sandbox's disk.
const diskBytes = 32 << 20

// withDefaults gives o 256 MiB of memory unless it says otherwise.
func withDefaults(o oci.Options) oci.Options {
	if o.MemoryBytes == 0 {
		o.MemoryBytes = 256 << 20
	}
	return o
}

// prepare prepares a sandbox running o (see withDefaults) on a diskBytes disk.
func (e *env) prepare(tb testing.TB, o oci.Options) *sandbox {
	tb.Helper()
	return e.Prepare(tb, diskBytes, withDefaults(o))
}

// start prepares a sandbox as prepare does and starts it.
func (e *env) start(t *testing.T, o oci.Options) *sandbox {
	t.Helper()
	return e.Start(t, diskBytes, withDefaults(o))
}

// waitFor polls cond until it holds, failing the test after waitLimit.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	runtimetest.WaitFor(t, waitLimit, what, cond)
}

// waitLog waits until the container's log contains marker and returns the log.
func waitLog(t testing.TB, sb *sandbox, marker string) string {
	t.Helper()
	return runtimetest.WaitLog(t, waitLimit, sb, marker)
}

func processesOf(id string) []string { return runtimetest.ProcessesOf("runsc", id) }
