package integration

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/runsc"
	"github.com/cubby-dev/cubby/internal/runtime/runtimetest"
)

// newRunscBackend is a local backend under runsc with user namespaces on.
func newRunscBackend(tb testing.TB) *backendEnv {
	bin := repoBinary(tb, "runsc", "CUBBY_RUNSC")
	return newBackendEnv(tb, "cbm", true, func(root string, log *slog.Logger) runtime.Runtime {
		rt := runsc.New(bin, root, runsc.Options{}, log)
		tb.Cleanup(func() { _ = rt.ReleaseRoot() })
		return rt
	})
}

// memoryProbe starts, in sb, a shell holding a random value in memory only:
// on SIGUSR1 it writes it with its hostname to /tmp/probe. It returns once
// the shell's trap is set.
const memoryProbe = `rm -f /tmp/probe.ready; nohup bash -c 'v=$(cat /proc/sys/kernel/random/uuid); trap "echo \$v \$(hostname) > /tmp/probe" USR1; : > /tmp/probe.ready; while :; do sleep 0.05; done' >/dev/null 2>&1 & echo $! > /tmp/probe.pid
for i in $(seq 400); do [ -e /tmp/probe.ready ] && break; sleep 0.05; done`

func readProbe(t *testing.T, sb benchSandbox) string {
	t.Helper()
	return strings.TrimSpace(execIn(t, sb.proc, `rm -f /tmp/probe; kill -USR1 $(cat /tmp/probe.pid) && for i in $(seq 400); do [ -s /tmp/probe ] && break; sleep 0.05; done; cat /tmp/probe`))
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
		// It runs the agent binary the image was taken with, pinned in the
		// snapshot (a hard link here), whatever the server's is by then.
		if src := agentSource(t, e, f.id); filepath.Dir(src) != filepath.Join(e.dir, "snapshots", sn.ID) || !sameFile(t, src, e.bin) {
			t.Fatalf("fork runs agent %s, want the snapshot's pinned copy of %s", src, e.bin)
		}
	}
}

// BenchmarkSnapshotInterpreter measures full snapshots (gVisor) of a
// code-interpreter sandbox whose default contexts (Python with numpy,
// pandas and matplotlib preloaded, JavaScript) are up, through the local
// backend with user namespaces on: how long the source is held (pause,
// memory image, disk copy, resume), the snapshot's size (memory image and
// captured disk), a create from it (restore, re-init: the contexts are
// there at once), a fork of 20 (wall time, 4 restores at a time) and the
// disk each fork takes of its own. Medians.
func BenchmarkSnapshotInterpreter(b *testing.B) {
	bin := repoBinary(b, "runsc", "CUBBY_RUNSC")
	e := newBackendEnv(b, "cbi", true, func(root string, log *slog.Logger) runtime.Runtime {
		rt := runsc.New(bin, root, runsc.Options{}, log)
		b.Cleanup(func() { _ = rt.ReleaseRoot() })
		return rt
	})
	e.useTemplate(b, "code-interpreter")
	ctx := context.Background()
	src := mustCreate(b, e, "")
	waitReady(b, src)
	var held, snap, restore, fork []time.Duration
	var image, perFork int64
	for b.Loop() {
		t0 := time.Now()
		sn, err := e.b.Snapshot(ctx, src.id, "i"+randHex(8))
		if err != nil {
			b.Fatal(err)
		}
		snap, held, image = append(snap, time.Since(t0)), append(held, sn.Paused), sn.SizeBytes
		t1 := time.Now()
		kid := mustCreate(b, e, sn.ID)
		waitReady(b, kid)
		restore = append(restore, time.Since(t1))
		_ = e.b.Kill(ctx, kid.id)
		if err := e.b.DeleteSnapshot(ctx, sn.ID); err != nil {
			b.Fatal(err)
		}
		wall, forks, _ := benchFork(b, e, src.id)
		fork, perFork = append(fork, wall), forks/benchForks
	}
	b.ReportMetric(runtimetest.MedianMs(held), "source-held-ms")
	b.ReportMetric(runtimetest.MedianMs(snap), "snapshot-ms")
	b.ReportMetric(float64(image)/(1<<20), "snapshot-MiB")
	b.ReportMetric(runtimetest.MedianMs(restore), "create-from-snapshot-ms")
	b.ReportMetric(runtimetest.MedianMs(fork), "fork20-ms")
	b.ReportMetric(float64(perFork)/(1<<20), "disk-per-fork-MiB")
}

// waitReady waits until sb's agent reports its default code contexts up.
func waitReady(tb testing.TB, sb benchSandbox) {
	tb.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := sb.http.Get(sb.envd + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("sandbox %s: code contexts not ready: %v %v", sb.id, err, resp)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agentSource is the host file bind-mounted as the agent in sandbox id's bundle.
func agentSource(t *testing.T, e *backendEnv, id string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.dir, "sandboxes", id, "bundle", "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	for _, m := range spec.Mounts {
		if m.Destination == agentapi.AgentPath {
			return m.Source
		}
	}
	t.Fatalf("no agent mount in %s", id)
	return ""
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	sa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(sa, sb)
}
