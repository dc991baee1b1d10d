package runsc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/cgroups"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
)

// counterScript keeps a random token and a counter in shell memory and writes
// "token n" to /counter and "tick n" to stdout every 100 ms.
const counterScript = `tok=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n'); i=0
echo "host=$(hostname) uid=$(id -u)"
while :; do i=$((i+1)); echo "$tok $i" > /counter.tmp; mv /counter.tmp /counter; echo "tick $i"; sleep 0.1; done`

// readCounter parses /counter of sb from the overlay upper dir.
func readCounter(sb *sandbox) (tok string, n int, ok bool) {
	b, err := os.ReadFile(filepath.Join(sb.dir, rootfs.LayerName, "upper", "counter"))
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
	sb := e.start(t, oci.Options{Args: shell(counterScript), CPUCount: 1, MemoryBytes: 128 << 20, PidsLimit: 64})
	st, err := e.rt.State(ctx, sb.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runtime.StatusRunning || st.Pid <= 0 || st.Bundle != sb.dir || st.ID != sb.id {
		t.Fatalf("state %+v", st)
	}
	list, err := e.rt.List(ctx)
	if err != nil || !slices.ContainsFunc(list, func(s runtime.State) bool { return s.ID == sb.id }) {
		t.Errorf("List = %+v, %v", list, err)
	}
	log := waitLog(t, sb, "tick 1\n")
	if !strings.Contains(log, "host="+sb.id+" uid=0") {
		t.Errorf("log %q", log)
	}
	// Overlay "none": the write lands in the upper dir on the host, not in the template.
	waitCounter(t, sb, 0)
	if _, err := os.Stat(filepath.Join(e.lower, "counter")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("template changed: %v", err)
	}
	if s, err := cgroups.Read(sb.cgroupsPath); err != nil || s.MemLimit != 128<<20 || s.MemUsed == 0 {
		t.Errorf("cgroup sample %+v, %v", s, err)
	}

	if err := e.rt.Pause(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.rt.State(ctx, sb.id); st.Status != runtime.StatusPaused {
		t.Errorf("after pause: %+v", st)
	}
	_, paused, _ := readCounter(sb)
	if err := e.rt.Resume(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.rt.State(ctx, sb.id); st.Status != runtime.StatusRunning {
		t.Errorf("after resume: %+v", st)
	}
	waitCounter(t, sb, paused) // counts again

	// Kill works on a paused container too.
	if err := e.rt.Pause(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Kill(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(st.Pid, 0); !errors.Is(err, unix.ESRCH) && !isZombie(st.Pid) {
		t.Errorf("sandbox %d still alive after Kill: %v", st.Pid, err)
	}
	if _, err := e.rt.State(ctx, sb.id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("State after Kill: %v", err)
	}
	if err := e.rt.Kill(ctx, sb.id); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if err := e.rt.Pause(ctx, sb.id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Pause of unknown: %v", err)
	}
	if err := e.rt.Checkpoint(ctx, sb.id, t.TempDir()); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Checkpoint of unknown: %v", err)
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

func TestStartFailureCleansUp(t *testing.T) {
	e := setup(t)
	sb := e.prepare(t, oci.Options{Args: []string{"/no/such/binary"}})
	err := e.rt.Start(context.Background(), sb.id, sb.dir, sb.log)
	if err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
	if !strings.Contains(err.Error(), "no such file") {
		t.Errorf("error does not carry runsc's message: %v", err)
	}
	if _, err := e.rt.State(context.Background(), sb.id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("container left after failed Start: %v", err)
	}
	if err := e.rt.Start(context.Background(), "-bad", sb.dir, sb.log); err == nil {
		t.Error("invalid id accepted")
	}
}

// TestCheckpointRestore checks that processes survive Checkpoint → Restore with
// their memory: the shell's token and counter go on from where they were, twice
// (the second time from a paused container).
func TestCheckpointRestore(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.start(t, oci.Options{Args: shell(counterScript), CPUCount: 1})
	tok0, _ := waitCounter(t, sb, 3)
	for cycle := range 2 {
		img := filepath.Join(e.base, fmt.Sprintf("image-%d", cycle)) // created by Checkpoint
		if cycle == 1 {
			if err := e.rt.Pause(ctx, sb.id); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.rt.Checkpoint(ctx, sb.id, img); err != nil {
			t.Fatal(err)
		}
		if _, err := e.rt.State(ctx, sb.id); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("State after Checkpoint: %v", err)
		}
		if pids := processesOf(sb.id); len(pids) > 0 {
			t.Fatalf("processes left after Checkpoint: %v", pids)
		}
		if _, err := os.Stat(filepath.Join(img, "checkpoint.img")); err != nil {
			t.Fatalf("no image: %v", err)
		}
		tok, saved, ok := readCounter(sb)
		if !ok || tok != tok0 {
			t.Fatalf("counter after checkpoint %q %d %v", tok, saved, ok)
		}
		if err := e.rt.Restore(ctx, sb.id, sb.dir, img, sb.log); err != nil {
			t.Fatal(err)
		}
		if st, err := e.rt.State(ctx, sb.id); err != nil || st.Status != runtime.StatusRunning || st.Pid <= 0 {
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
	if err := e.rt.Restore(ctx, sb.id, sb.dir, filepath.Join(e.base, "image-0"), sb.log); err == nil {
		t.Error("Restore over a running container succeeded")
	}
}

// TestCheckpointDiskFull checks that a checkpoint failing for lack of space
// leaves the container running with its processes.
func TestCheckpointDiskFull(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.start(t, oci.Options{Args: shell(counterScript)})
	tok0, n := waitCounter(t, sb, 0)
	img := filepath.Join(e.base, "small-"+suffix(t))
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
	err := e.rt.Checkpoint(ctx, sb.id, img)
	if err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Checkpoint to a full disk: %v", err)
	}
	if st, err := e.rt.State(ctx, sb.id); err != nil || st.Status != runtime.StatusRunning {
		t.Fatalf("after failed checkpoint: %+v %v", st, err)
	}
	if tok, _ := waitCounter(t, sb, n); tok != tok0 {
		t.Errorf("token %q, want %q", tok, tok0)
	}
}

func TestRestoreBadImageCleansUp(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.prepare(t, oci.Options{Args: shell(counterScript)})
	err := e.rt.Restore(ctx, sb.id, sb.dir, t.TempDir(), sb.log)
	if err == nil {
		t.Fatal("Restore from an empty image dir succeeded")
	}
	if _, err := e.rt.State(ctx, sb.id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("container left after failed Restore: %v", err)
	}
}

// BenchmarkRunscStartKill measures Start and Kill of a busybox `sleep` container
// whose rootfs and bundle are prepared once, reporting the medians in ms.
func BenchmarkRunscStartKill(b *testing.B) {
	e := setup(b)
	ctx := context.Background()
	sb := e.prepare(b, oci.Options{Args: []string{"sleep", "1000"}})
	var starts, kills []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := e.rt.Start(ctx, sb.id, sb.dir, sb.log); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := e.rt.Kill(ctx, sb.id); err != nil {
			b.Fatal(err)
		}
		starts, kills = append(starts, t1.Sub(t0)), append(kills, time.Since(t1))
	}
	b.ReportMetric(medianMs(starts), "start-ms")
	b.ReportMetric(medianMs(kills), "kill-ms")
}

// BenchmarkCheckpointRestore measures Checkpoint and Restore of the counter
// container, reporting the medians in ms and the image size in bytes.
func BenchmarkCheckpointRestore(b *testing.B) {
	e := setup(b)
	ctx := context.Background()
	sb := e.prepare(b, oci.Options{Args: shell(counterScript)})
	if err := e.rt.Start(ctx, sb.id, sb.dir, sb.log); err != nil {
		b.Fatal(err)
	}
	waitCounter(b, sb, 0)
	img := filepath.Join(e.base, "image")
	var cps, rss []time.Duration
	var size int64
	for b.Loop() {
		os.RemoveAll(img)
		t0 := time.Now()
		if err := e.rt.Checkpoint(ctx, sb.id, img); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := e.rt.Restore(ctx, sb.id, sb.dir, img, sb.log); err != nil {
			b.Fatal(err)
		}
		cps, rss = append(cps, t1.Sub(t0)), append(rss, time.Since(t1))
		size = dirSize(img)
	}
	b.ReportMetric(medianMs(cps), "checkpoint-ms")
	b.ReportMetric(medianMs(rss), "restore-ms")
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
	sb := e.start(t, oci.Options{Args: shell("echo done")})
	waitLog(t, sb, "done")
	waitFor(t, "the container to stop", func() bool {
		st, err := e.rt.State(ctx, sb.id)
		return err == nil && st.Status == runtime.StatusStopped && st.Pid == 0
	})
	if err := e.rt.Kill(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rt.State(ctx, sb.id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("State after Kill: %v", err)
	}
}

// TestDebugLogs checks that Options.Debug makes runsc write its debug logs.
func TestDebugLogs(t *testing.T) {
	e := setup(t)
	dir := filepath.Join(e.base, "debug")
	e.rt = New(e.rt.binary, e.state, Options{Debug: true, DebugLogDir: dir}, nil)
	sb := e.start(t, oci.Options{Args: []string{"sleep", "1000"}})
	if err := e.rt.Kill(context.Background(), sb.id); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"create", "boot", "gofer", "delete"} {
		if m, _ := filepath.Glob(filepath.Join(dir, "*."+cmd+".txt")); len(m) == 0 {
			t.Errorf("no %s debug log in %s", cmd, dir)
		}
	}
}
