package runc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/cgroups"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/rootfs/testtree"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
)

const runcBinary = "/usr/sbin/runc"

// waitLimit bounds every wait for a condition inside a container.
const waitLimit = 20 * time.Second

type env struct {
	rt    *Runtime
	fs    *rootfs.Manager
	lower string
	base  string
	state string
}

type sandbox struct {
	id, dir, log, cgroupsPath string
}

func setup(tb testing.TB) *env {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root")
	}
	if _, err := os.Stat(runcBinary); err != nil {
		tb.Skip("needs runc")
	}
	base := tb.TempDir()
	e := &env{lower: filepath.Join(base, "lower"), base: base, state: filepath.Join(base, "state")}
	if err := testtree.Busybox(e.lower); err != nil {
		tb.Fatal(err)
	}
	e.rt = New(runcBinary, e.state, nil)
	e.fs = rootfs.New(filepath.Join(base, "cache"), nil)
	return e
}

func suffix(tb testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

// prepare mounts a rootfs and writes the bundle of a new sandbox; cleanup kills
// it, releases the rootfs and checks nothing is left behind.
func (e *env) prepare(tb testing.TB, disk int64, o oci.Options) *sandbox {
	tb.Helper()
	id := "cubby-" + suffix(tb)
	sb := &sandbox{id: id, dir: filepath.Join(e.base, id), log: filepath.Join(e.base, id+".log"),
		cgroupsPath: "/" + id}
	ctx := context.Background()
	rootfsDir, err := e.fs.Prepare(ctx, sb.dir, e.lower, disk)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.rt.Kill(ctx, id); err != nil {
			tb.Errorf("cleanup kill: %v", err)
		}
		if err := e.fs.Release(ctx, sb.dir); err != nil {
			tb.Errorf("cleanup release: %v", err)
		}
		e.assertGone(tb, sb)
	})
	o.ID, o.RootfsDir, o.CgroupsPath = id, rootfsDir, sb.cgroupsPath
	spec, err := oci.Build(o)
	if err != nil {
		tb.Fatal(err)
	}
	if err := oci.WriteBundle(sb.dir, spec); err != nil {
		tb.Fatal(err)
	}
	return sb
}

func (e *env) start(t *testing.T, disk int64, o oci.Options) *sandbox {
	t.Helper()
	sb := e.prepare(t, disk, o)
	if err := e.rt.Start(context.Background(), sb.id, sb.dir, sb.log); err != nil {
		t.Fatal(err)
	}
	return sb
}

// assertGone checks that no runc state, cgroup, mount, loop device or directory of
// sb is left.
func (e *env) assertGone(tb testing.TB, sb *sandbox) {
	tb.Helper()
	if _, err := e.rt.State(context.Background(), sb.id); !errors.Is(err, runtime.ErrNotFound) {
		tb.Errorf("runc still knows %s: %v", sb.id, err)
	}
	if _, err := os.Stat(filepath.Join(e.state, sb.id)); !errors.Is(err, os.ErrNotExist) {
		tb.Errorf("runc state dir left: %v", err)
	}
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			if _, err := os.Stat(filepath.Join(m.Point, sb.cgroupsPath)); !errors.Is(err, os.ErrNotExist) {
				tb.Errorf("cgroup left in %s: %v", m.Point, err)
			}
		}
		if strings.HasPrefix(m.Point, sb.dir) {
			tb.Errorf("mount left: %s", m.Point)
		}
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(sb.dir)) {
			tb.Errorf("loop device left: %s -> %s", f, b)
		}
	}
	if _, err := os.Stat(sb.dir); !errors.Is(err, os.ErrNotExist) {
		tb.Errorf("sandbox dir left: %v", err)
	}
}

// waitFor polls cond until it holds, failing the test after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitLog waits until the container's log contains marker and returns the log.
func waitLog(t *testing.T, sb *sandbox, marker string) string {
	t.Helper()
	var log []byte
	waitFor(t, "log line "+marker, func() bool {
		log, _ = os.ReadFile(sb.log)
		return bytes.Contains(log, []byte(marker))
	})
	return string(log)
}

func shell(script string) []string { return []string{"sh", "-c", script} }

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	e := setup(t)
	sb := e.start(t, 32<<20, oci.Options{
		Args:     shell(`echo hello > /written; echo "host=$(hostname) uid=$(id -u)"; exec sleep 1000`),
		CPUCount: 1, MemoryBytes: 128 << 20, PidsLimit: 64,
	})
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
	log := waitLog(t, sb, "host=")
	if !strings.Contains(log, "host="+sb.id+" uid=0") {
		t.Errorf("log %q", log)
	}
	// The write lands in the upper dir inside the mounted disk image, not in the template.
	waitFor(t, "write in the image", func() bool {
		b, _ := os.ReadFile(filepath.Join(sb.dir, rootfs.LayerName, "upper", "written"))
		return string(b) == "hello\n"
	})
	if _, err := os.Stat(filepath.Join(e.lower, "written")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("template changed: %v", err)
	}

	s, err := cgroups.Read(sb.cgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUUsageNs == 0 || s.MemUsed == 0 || s.MemLimit != 128<<20 || s.PidsCurrent != 1 {
		t.Errorf("cgroup sample %+v", s)
	}

	if err := e.rt.Pause(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.rt.State(ctx, sb.id); st.Status != runtime.StatusPaused {
		t.Errorf("after pause: %+v", st)
	}
	if err := e.rt.Resume(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.rt.State(ctx, sb.id); st.Status != runtime.StatusRunning {
		t.Errorf("after resume: %+v", st)
	}
	// Kill works on a paused container too.
	if err := e.rt.Pause(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Kill(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(st.Pid, 0); !errors.Is(err, unix.ESRCH) && !isZombie(st.Pid) {
		t.Errorf("init %d still alive after Kill: %v", st.Pid, err)
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
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

func TestStartFailureCleansUp(t *testing.T) {
	e := setup(t)
	sb := e.prepare(t, 16<<20, oci.Options{Args: []string{"/no/such/binary"}})
	err := e.rt.Start(context.Background(), sb.id, sb.dir, sb.log)
	if err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
	if !strings.Contains(err.Error(), "no such file") {
		t.Errorf("error does not carry runc's message: %v", err)
	}
	if _, err := e.rt.State(context.Background(), sb.id); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("container left after failed Start: %v", err)
	}
	if err := e.rt.Start(context.Background(), "-bad", sb.dir, sb.log); err == nil {
		t.Error("invalid id accepted")
	}
}

func TestDiskFull(t *testing.T) {
	e := setup(t)
	sb := e.start(t, 16<<20, oci.Options{
		Args:        shell(`dd if=/dev/zero of=/fill bs=1M 2>&1; echo "dd-exit=$?"; exec sleep 1000`),
		MemoryBytes: 128 << 20,
	})
	log := waitLog(t, sb, "dd-exit=")
	if !strings.Contains(log, "No space left on device") || !strings.Contains(log, "dd-exit=1") {
		t.Errorf("log %q, want ENOSPC", log)
	}
	used, total, err := rootfs.Usage(sb.dir)
	if err != nil || total == 0 || used < total/10*9 {
		t.Errorf("disk usage %d of %d: %v", used, total, err)
	}
	if err := os.WriteFile(filepath.Join(t.TempDir(), "x"), make([]byte, 1<<20), 0o600); err != nil {
		t.Errorf("host disk affected: %v", err)
	}
	if st, err := e.rt.State(context.Background(), sb.id); err != nil || st.Status != runtime.StatusRunning {
		t.Errorf("sandbox after ENOSPC: %+v %v", st, err)
	}
}

func TestMemoryHogOOMKilled(t *testing.T) {
	e := setup(t)
	sb := e.start(t, 16<<20, oci.Options{
		Args: shell(`sh -c 'x=$(head -c 300000000 /dev/zero | tr "\0" a); echo survived'; ` +
			`echo "hog-exit=$?"; exec sleep 1000`),
		CPUCount: 1, MemoryBytes: 64 << 20,
	})
	log := waitLog(t, sb, "hog-exit=")
	if !strings.Contains(log, "hog-exit=137") || strings.Contains(log, "survived") {
		t.Errorf("log %q, want the hog SIGKILLed (137)", log)
	}
	s, err := cgroups.Read(sb.cgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	if s.OOMKills == 0 || s.MemLimit != 64<<20 {
		t.Errorf("sample %+v, want an OOM kill under a 64 MiB limit", s)
	}
}

func TestForkBombCapped(t *testing.T) {
	e := setup(t)
	const limit = 32
	sb := e.start(t, 16<<20, oci.Options{
		Args:     shell(`f() { sleep 1000 & f & }; f; exec sleep 1000`),
		CPUCount: 1, MemoryBytes: 128 << 20, PidsLimit: limit,
	})
	waitFor(t, "the pids limit to be hit", func() bool { return pidsMaxEvents(t, sb.cgroupsPath) > 0 })
	s, err := cgroups.Read(sb.cgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	if s.PidsCurrent == 0 || s.PidsCurrent > limit {
		t.Errorf("pids.current %d, limit %d", s.PidsCurrent, limit)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("host cannot fork: %v", err)
	}
	if err := e.rt.Kill(context.Background(), sb.id); err != nil {
		t.Fatal(err)
	}
}

// pidsMaxEvents reads "max N" from pids.events: how often a fork hit pids.max.
func pidsMaxEvents(t *testing.T, cgroupsPath string) int {
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if (m.FSType == "cgroup" && m.HasSuperOpt("pids")) || (m.FSType == "cgroup2" && cgroups.Mode() == cgroups.LayoutV2) {
			b, err := os.ReadFile(filepath.Join(m.Point, cgroupsPath, "pids.events"))
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(b), "max")))
			return n
		}
	}
	t.Skip("no pids controller")
	return 0
}

// BenchmarkStartKill measures Start and Kill of a busybox `sleep` container whose
// rootfs and bundle are prepared once, reporting the medians in ms.
func BenchmarkStartKill(b *testing.B) {
	e := setup(b)
	ctx := context.Background()
	sb := e.prepare(b, 16<<20, oci.Options{Args: []string{"sleep", "1000"}, MemoryBytes: 64 << 20})
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

func medianMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}
