package runsc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/cgroups"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
	"github.com/cubby-dev/cubby/internal/runtime/runtimetest"
)

// counterScript keeps a random token and a counter in shell memory and writes
// "token n" to /counter and "tick n" to stdout every 100 ms.
const counterScript = `tok=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'); i=0
echo "host=$(hostname) uid=$(id -u)"
while :; do i=$((i+1)); echo "$tok $i" > /counter.tmp; mv /counter.tmp /counter; echo "tick $i"; sleep 0.1; done`

// readCounter parses /counter of sb from the overlay upper dir.
func readCounter(sb *sandbox) (tok string, n int, ok bool) {
	b, err := os.ReadFile(filepath.Join(sb.Dir, rootfs.LayerName, "upper", "counter"))
	if err != nil {
		return "", 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return "", 0, false
	}
	n, err = strconv.Atoi(f[1])
	return f[0], n, err == nil
}

// waitCounter waits until the counter exceeds n and returns its token and value.
func waitCounter(t testing.TB, sb *sandbox, n int) (string, int) {
	t.Helper()
	var tok string
	var v int
	waitFor(t, fmt.Sprintf("counter > %d", n), func() bool {
		var ok bool
		tok, v, ok = readCounter(sb)
		return ok && v > n
	})
	return tok, v
}

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.start(t, oci.Options{Args: runtimetest.Shell(counterScript), CPUCount: 1, MemoryBytes: 128 << 20, PidsLimit: 64})
	st := e.CheckRunning(t, sb)
	log := waitLog(t, sb, "tick 1\n")
	if !strings.Contains(log, "host="+sb.ID+" uid=0") {
		t.Errorf("log %q", log)
	}
	// Overlay "none": the write lands in the upper dir on the host, not in the template.
	waitCounter(t, sb, 0)
	if _, err := os.Stat(filepath.Join(e.Lower, "counter")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("template changed: %v", err)
	}
	if s, err := cgroups.Read(sb.CgroupsPath); err != nil || s.MemLimit != 128<<20 || s.MemUsed == 0 {
		t.Errorf("cgroup sample %+v, %v", s, err)
	}

	var paused int
	e.CheckPauseResume(t, sb, func() { _, paused, _ = readCounter(sb) })
	waitCounter(t, sb, paused) // counts again

	// Kill works on a paused container too.
	e.CheckKillPaused(t, sb, st.Pid)
	if err := e.RT.Checkpoint(ctx, sb.ID, t.TempDir()); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Checkpoint of unknown: %v", err)
	}
}

func TestStartFailureCleansUp(t *testing.T) {
	setup(t).CheckStartFailure(t, diskBytes, withDefaults(oci.Options{}))
}

// TestCheckpointRestore checks that processes survive Checkpoint → Restore with
// their memory: the shell's token and counter go on from where they were, twice
// (the second time from a paused container).
func TestCheckpointRestore(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.start(t, oci.Options{Args: runtimetest.Shell(counterScript), CPUCount: 1})
	tok0, _ := waitCounter(t, sb, 3)
	for cycle := range 2 {
		img := filepath.Join(e.Base, fmt.Sprintf("image-%d", cycle)) // created by Checkpoint
		if cycle == 1 {
			if err := e.RT.Pause(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.RT.Checkpoint(ctx, sb.ID, img); err != nil {
			t.Fatal(err)
		}
		if _, err := e.RT.State(ctx, sb.ID); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("State after Checkpoint: %v", err)
		}
		if pids := processesOf(sb.ID); len(pids) > 0 {
			t.Fatalf("processes left after Checkpoint: %v", pids)
		}
		if _, err := os.Stat(filepath.Join(img, "checkpoint.img")); err != nil {
			t.Fatalf("no image: %v", err)
		}
		tok, saved, ok := readCounter(sb)
		if !ok || tok != tok0 {
			t.Fatalf("counter after checkpoint %q %d %v", tok, saved, ok)
		}
		if err := e.RT.Restore(ctx, sb.ID, sb.Dir, img, sb.Out); err != nil {
			t.Fatal(err)
		}
		if st, err := e.RT.State(ctx, sb.ID); err != nil || st.Status != runtime.StatusRunning || st.Pid <= 0 {
			t.Fatalf("State after Restore: %+v %v", st, err)
		}
		// The shell goes on with its own memory: same token, the next number, and
		// its stdout still reaches the log.
		waitLog(t, sb, fmt.Sprintf("tick %d\n", saved+1))
		tok, n := waitCounter(t, sb, saved)
		if tok != tok0 {
			t.Fatalf("cycle %d: token %q after restore, want %q (process restarted?)", cycle, tok, tok0)
		}
		t.Logf("cycle %d: counter %d at checkpoint, %d after restore", cycle, saved, n)
	}
	if err := e.RT.Restore(ctx, sb.ID, sb.Dir, filepath.Join(e.Base, "image-0"), sb.Out); err == nil {
		t.Error("Restore over a running container succeeded")
	}
}

// TestCheckpointDiskFull checks that a checkpoint failing for lack of space
// leaves the container running with its processes.
func TestCheckpointDiskFull(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.start(t, oci.Options{Args: runtimetest.Shell(counterScript)})
	tok0, n := waitCounter(t, sb, 0)
	img := filepath.Join(e.Base, "small-"+runtimetest.Suffix(t))
	if err := os.Mkdir(img, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", img, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(img, unix.MNT_DETACH); err != nil {
			t.Error(err)
		}
	})
	err := e.RT.Checkpoint(ctx, sb.ID, img)
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Checkpoint to a full disk: %v", err)
	}
	if st, err := e.RT.State(ctx, sb.ID); err != nil || st.Status != runtime.StatusRunning {
		t.Fatalf("after failed checkpoint: %+v %v", st, err)
	}
	if tok, _ := waitCounter(t, sb, n); tok != tok0 {
		t.Errorf("token %q, want %q", tok, tok0)
	}
}

func TestRestoreBadImageCleansUp(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.prepare(t, oci.Options{Args: runtimetest.Shell(counterScript)})
	err := e.RT.Restore(ctx, sb.ID, sb.Dir, t.TempDir(), sb.Out)
	if err == nil {
		t.Fatal("Restore from an empty image dir succeeded")
	}
	if _, err := e.RT.State(ctx, sb.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("container left after failed Restore: %v", err)
	}
}

// BenchmarkRunscStartKill measures Start and Kill of a busybox `sleep` container
// whose rootfs and bundle are prepared once, reporting the medians in ms.
func BenchmarkRunscStartKill(b *testing.B) {
	e := setup(b)
	sb := e.prepare(b, oci.Options{Args: []string{"sleep", "1000"}})
	e.BenchStartKill(b, sb)
}

// BenchmarkCheckpointRestore measures Checkpoint and Restore of the counter
// container, reporting the medians in ms and the image size in bytes.
func BenchmarkCheckpointRestore(b *testing.B) {
	e := setup(b)
	ctx := context.Background()
	sb := e.prepare(b, oci.Options{Args: runtimetest.Shell(counterScript)})
	if err := e.RT.Start(ctx, sb.ID, sb.Dir, sb.Out); err != nil {
		b.Fatal(err)
	}
	waitCounter(b, sb, 0)
	img := filepath.Join(e.Base, "image")
	var cps, rss []time.Duration
	var size int64
	for b.Loop() {
		os.RemoveAll(img)
		t0 := time.Now()
		if err := e.RT.Checkpoint(ctx, sb.ID, img); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := e.RT.Restore(ctx, sb.ID, sb.Dir, img, sb.Out); err != nil {
			b.Fatal(err)
		}
		cps, rss = append(cps, t1.Sub(t0)), append(rss, time.Since(t1))
		size = dirSize(img)
	}
	b.ReportMetric(runtimetest.MedianMs(cps), "checkpoint-ms")
	b.ReportMetric(runtimetest.MedianMs(rss), "restore-ms")
	b.ReportMetric(float64(size), "image-bytes")
}

func dirSize(dir string) int64 {
	var n int64
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if fi, err := en.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// TestKillExited checks Kill of a container whose init has exited on its own.
func TestKillExited(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.start(t, oci.Options{Args: runtimetest.Shell("echo done")})
	waitLog(t, sb, "done")
	waitFor(t, "the container to stop", func() bool {
		st, err := e.RT.State(ctx, sb.ID)
		return err == nil && st.Status == runtime.StatusStopped && st.Pid == 0
	})
	if err := e.RT.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.RT.State(ctx, sb.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("State after Kill: %v", err)
	}
}

// TestDebugLogs checks that Options.Debug makes runsc write its debug logs.
func TestDebugLogs(t *testing.T) {
	e := setup(t)
	dir := filepath.Join(e.Base, "debug")
	e.RT = New(e.RT.cli.Binary, e.State, Options{Debug: true, DebugLogDir: dir}, nil)
	sb := e.start(t, oci.Options{Args: []string{"sleep", "1000"}})
	if err := e.RT.Kill(context.Background(), sb.ID); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"create", "boot", "gofer", "delete"} {
		if m, _ := filepath.Glob(filepath.Join(dir, "*."+cmd+".txt")); len(m) == 0 {
			t.Errorf("no %s debug log in %s", cmd, dir)
		}
	}
}
