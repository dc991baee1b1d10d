package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/runc"
	"github.com/cubby-dev/cubby/internal/runtime/runsc"
	"github.com/cubby-dev/cubby/internal/runtime/runtimetest"
)

// benchForks is the fork count of BenchmarkSnapshot's fork figure.
const benchForks = 20

// BenchmarkSnapshot measures snapshots and forks through the local backend
// (user namespaces on), under runc and runsc, of a base sandbox that wrote
// 64 MiB: Backend.Snapshot (total, and how long the source's disk was
// frozen), a create from the snapshot against a fresh create, a fork of 20
// (one snapshot, then 20 creates from it, 4 at a time as the control plane
// does: wall time) and the disk the 20 forks and their snapshot take against
// one full copy of the source (template tree plus what it wrote). Medians.
func BenchmarkSnapshot(b *testing.B) {
	for _, rt := range []struct {
		name string
		new  func(tb testing.TB) func(string, *slog.Logger) runtime.Runtime
	}{
		{"runc", func(tb testing.TB) func(string, *slog.Logger) runtime.Runtime {
			bin := repoBinary(tb, "runc", "CUBBY_RUNC")
			return func(root string, log *slog.Logger) runtime.Runtime { return runc.New(bin, root, log) }
		}},
		{"runsc", func(tb testing.TB) func(string, *slog.Logger) runtime.Runtime {
			bin := repoBinary(tb, "runsc", "CUBBY_RUNSC")
			return func(root string, log *slog.Logger) runtime.Runtime {
				rt := runsc.New(bin, root, runsc.Options{}, log)
				tb.Cleanup(func() { _ = rt.ReleaseRoot() })
				return rt
			}
		}},
	} {
		b.Run(rt.name, func(b *testing.B) { benchSnapshot(b, newBackendEnv(b, "cbn", true, rt.new(b))) })
	}
}

func benchSnapshot(b *testing.B, e *backendEnv) {
	ctx := context.Background()
	src := mustCreate(b, e, "")
	execIn(b, src.proc, "head -c 64M /dev/urandom > /home/user/data && sync")
	var snap, paused, fresh, fromSnap, fork []time.Duration
	var forkBytes, fullBytes int64
	tree := allocatedTree(b, e.lower)
	for b.Loop() {
		t0 := time.Now()
		sn, err := e.b.Snapshot(ctx, src.id, "s"+randHex(8))
		if err != nil {
			b.Fatal(err)
		}
		snap, paused = append(snap, time.Since(t0)), append(paused, sn.Paused)
		for _, from := range []string{"", sn.ID} {
			t1 := time.Now()
			kid := mustCreate(b, e, from)
			if from == "" {
				fresh = append(fresh, time.Since(t1))
			} else {
				fromSnap = append(fromSnap, time.Since(t1))
			}
			_ = e.b.Kill(ctx, kid.id)
		}
		wall, forks, captured := benchFork(b, e, src.id)
		fork = append(fork, wall)
		forkBytes, fullBytes = forks+captured, tree+sn.SizeBytes
		if err := e.b.DeleteSnapshot(ctx, sn.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(runtimetest.MedianMs(snap), "snapshot-ms")
	b.ReportMetric(runtimetest.MedianMs(paused), "paused-ms")
	b.ReportMetric(runtimetest.MedianMs(fresh), "create-ms")
	b.ReportMetric(runtimetest.MedianMs(fromSnap), "create-from-snapshot-ms")
	b.ReportMetric(runtimetest.MedianMs(fork), "fork20-ms")
	b.ReportMetric(float64(forkBytes)/(1<<20), "fork20-disk-MiB")
	b.ReportMetric(float64(fullBytes)/(1<<20), "full-copy-MiB")
}

// benchFork snapshots src and starts benchForks sandboxes from it, 4 at a
// time; it returns the wall time, the disk the forks take of their own and
// the disk of their snapshot, then kills them.
func benchFork(b *testing.B, e *backendEnv, src string) (time.Duration, int64, int64) {
	ctx := context.Background()
	t0 := time.Now()
	sn, err := e.b.Snapshot(ctx, src, "f"+randHex(8))
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, benchForks)
	errs := make([]error, benchForks)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			sb, err := createIn(b, e, sn.ID)
			ids[i], errs[i] = sb.id, err
		}()
	}
	wg.Wait()
	wall := time.Since(t0)
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	var used int64
	for _, id := range ids {
		used += allocated(b, filepath.Join(e.dir, "sandboxes", id, "disk.img"))
		_ = e.b.Kill(ctx, id)
	}
	if err := e.b.DeleteSnapshot(ctx, sn.ID); err != nil {
		b.Fatal(err)
	}
	return wall, used, sn.SizeBytes
}

type benchSandbox struct {
	id   string
	proc processconnect.ProcessClient
	envd string       // base URL of its agent
	http *http.Client // sends its access token
}

// mustCreateT is benchCreate for a test.
func mustCreateT(t *testing.T, e *backendEnv) benchSandbox {
	t.Helper()
	sb, err := createIn(t, e, "")
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// createIn creates a base sandbox (from snapshot snap when not "") killed
// when tb ends. Safe from any goroutine.
func createIn(tb testing.TB, e *backendEnv, snap string) (benchSandbox, error) {
	return createStart(tb, e, snap, nil)
}

// createStart is createIn with a template start command (nil = none).
func createStart(tb testing.TB, e *backendEnv, snap string, start *backend.StartCommand) (benchSandbox, error) {
	id, token := "b"+randHex(8), randHex(16)
	in, err := e.b.Create(context.Background(), backend.CreateRequest{
		SandboxID: id, RootfsDir: e.lower, CPUCount: 1, MemoryMB: 512, DiskSizeMB: 512, Snapshot: snap,
		Init:  agentapi.InitRequest{AccessToken: token, DefaultUser: "user", DefaultWorkdir: "/home/user"},
		Start: start,
	})
	if err != nil {
		return benchSandbox{}, err
	}
	tb.Cleanup(func() { _ = e.b.Kill(context.Background(), id) })
	hc := &http.Client{Transport: tokenTransport{token, &http.Transport{}}}
	envd := fmt.Sprintf("http://%s:%d", in.Addr, agentapi.EnvdPort)
	return benchSandbox{id: id, proc: processconnect.NewProcessClient(hc, envd, connect.WithProtoJSON()), envd: envd, http: hc}, nil
}

// mustCreate is benchCreate failing b on error.
func mustCreate(b *testing.B, e *backendEnv, snap string) benchSandbox {
	sb, err := createIn(b, e, snap)
	if err != nil {
		b.Fatal(err)
	}
	return sb
}

func allocated(tb testing.TB, path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		tb.Fatal(err)
	}
	return st.Blocks * 512
}

// allocatedTree sums the allocated bytes of the files below dir.
func allocatedTree(tb testing.TB, dir string) int64 {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err == nil {
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return total
}
