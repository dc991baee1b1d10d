package integration

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/runsc"
)

// newRunscBackend is a local backend under runsc with user namespaces on.
func newRunscBackend(t *testing.T) *backendEnv {
	bin := runscBinary(t)
	return newBackendEnv(t, "cbm", true, func(root string, log *slog.Logger) runtime.Runtime {
		rt := runsc.New(bin, root, runsc.Options{}, log)
		t.Cleanup(func() { _ = rt.ReleaseRoot() })
		return rt
	})
}

// memoryProbe starts, in sb, a shell holding a random value in memory only:
// on SIGUSR1 it writes it with its hostname to /tmp/probe. It returns the
// value.
const memoryProbe = `nohup bash -c 'v=$(cat /proc/sys/kernel/random/uuid); trap "echo \$v \$(hostname) > /tmp/probe" USR1; while :; do sleep 0.05; done' >/dev/null 2>&1 & echo $! > /tmp/probe.pid`

func readProbe(t *testing.T, sb benchSandbox) string {
	t.Helper()
	return strings.TrimSpace(execIn(t, sb.proc, `rm -f /tmp/probe; kill -USR1 $(cat /tmp/probe.pid) && for i in $(seq 100); do [ -s /tmp/probe ] && break; sleep 0.05; done; cat /tmp/probe`))
}

// TestSnapshotFullGVisor: under gVisor a snapshot holds memory and processes:
// a sandbox started from it runs the source's processes with their memory,
// under its own hostname, while the source runs on; the record says "full".
func TestSnapshotFullGVisor(t *testing.T) {
	e := newRunscBackend(t)
	ctx := context.Background()
	src := mustCreateT(t, e)
	execIn(t, src.proc, memoryProbe)
	want := readProbe(t, src)
	execIn(t, src.proc, "echo kept > /home/user/file")
	sn, err := e.b.Snapshot(ctx, src.id, "m"+randHex(8))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.b.DeleteSnapshot(context.Background(), sn.ID) })
	t.Logf("snapshot: mode %s, %d bytes, source held %v", sn.Mode, sn.SizeBytes, sn.Paused)
	if sn.Mode != backend.SnapshotFull {
		t.Fatalf("mode %q, want full", sn.Mode)
	}
	if got := readProbe(t, src); got != want {
		t.Fatalf("source after snapshot: %q, want %q", got, want)
	}
	for range 2 {
		t0 := time.Now()
		f, err := createIn(t, e, sn.ID)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("restored %s in %v", f.id, time.Since(t0))
		v, _, _ := strings.Cut(want, " ")
		if got := readProbe(t, f); got != v+" "+f.id {
			t.Fatalf("fork probe %q, want %q", got, v+" "+f.id)
		}
		if got := execIn(t, f.proc, "cat /home/user/file; hostname"); got != "kept\n"+f.id+"\n" {
			t.Fatalf("fork files/hostname: %q", got)
		}
	}
}
