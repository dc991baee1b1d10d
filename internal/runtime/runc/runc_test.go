package runc

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/cgroups"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
	"github.com/cubby-dev/cubby/internal/runtime/runtimetest"
)

// waitLimit bounds every wait for a condition inside a container.
const waitLimit = 20 * time.Second

type env = runtimetest.Env[*Runtime]

type sandbox = runtimetest.Sandbox

func setup(tb testing.TB) *env {
	tb.Helper()
	return runtimetest.NewEnv(tb, func(tb testing.TB, state string) *Runtime {
		return New(runtimetest.Tool(tb, "runc", "CUBBY_RUNC"), state, nil)
	})
}

// waitFor polls cond until it holds, failing the test after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	runtimetest.WaitFor(t, waitLimit, what, cond)
}

// waitLog waits until the container's log contains marker and returns the log.
func waitLog(t *testing.T, sb *sandbox, marker string) string {
	t.Helper()
	return runtimetest.WaitLog(t, waitLimit, sb, marker)
}

func TestLifecycle(t *testing.T) {
	e := setup(t)
	sb := e.Start(t, 32<<20, oci.Options{
		Args:     runtimetest.Shell(`echo hello > /written; echo "host=$(hostname) uid=$(id -u)"; exec sleep 1000`),
		CPUCount: 1, MemoryBytes: 128 << 20, PidsLimit: 64,
	})
	st := e.CheckRunning(t, sb)
	log := waitLog(t, sb, "host=")
	if !strings.Contains(log, "host="+sb.ID+" uid=0") {
		t.Errorf("log %q", log)
	}
	// The write lands in the upper dir inside the mounted disk image, not in the template.
	waitFor(t, "write in the image", func() bool {
		b, _ := os.ReadFile(filepath.Join(sb.Dir, rootfs.LayerName, "upper", "written"))
		return string(b) == "hello\n"
	})
	if _, err := os.Stat(filepath.Join(e.Lower, "written")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("template changed: %v", err)
	}

	s, err := cgroups.Read(sb.CgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUUsageNs == 0 || s.MemUsed == 0 || s.MemLimit != 128<<20 || s.PidsCurrent != 1 {
		t.Errorf("cgroup sample %+v", s)
	}

	e.CheckPauseResume(t, sb, nil)
	// Kill works on a paused container too.
	e.CheckKillPaused(t, sb, st.Pid)
}

func TestStartFailureCleansUp(t *testing.T) {
	setup(t).CheckStartFailure(t, 16<<20, oci.Options{})
}

func TestDiskFull(t *testing.T) {
	e := setup(t)
	sb := e.Start(t, 16<<20, oci.Options{
		Args:        runtimetest.Shell(`dd if=/dev/zero of=/fill bs=1M 2>&1; echo "dd-exit=$?"; exec sleep 1000`),
		MemoryBytes: 128 << 20,
	})
	log := waitLog(t, sb, "dd-exit=")
	if !strings.Contains(log, "No space left on device") || !strings.Contains(log, "dd-exit=1") {
		t.Errorf("log %q, want ENOSPC", log)
	}
	used, total, err := rootfs.Usage(sb.Dir)
	if err != nil || total == 0 || used < total/10*9 {
		t.Errorf("disk usage %d of %d: %v", used, total, err)
	}
	if err := os.WriteFile(filepath.Join(t.TempDir(), "x"), make([]byte, 1<<20), 0o600); err != nil {
		t.Errorf("host disk affected: %v", err)
	}
	if st, err := e.RT.State(context.Background(), sb.ID); err != nil || st.Status != runtime.StatusRunning {
		t.Errorf("sandbox after ENOSPC: %+v %v", st, err)
	}
}

func TestMemoryHogOOMKilled(t *testing.T) {
	e := setup(t)
	sb := e.Start(t, 16<<20, oci.Options{
		Args: runtimetest.Shell(`sh -c 'x=$(head -c 300000000 /dev/zero | tr "\0" a); echo survived'; ` +
			`echo "hog-exit=$?"; exec sleep 1000`),
		CPUCount: 1, MemoryBytes: 64 << 20,
	})
	log := waitLog(t, sb, "hog-exit=")
	if !strings.Contains(log, "hog-exit=137") || strings.Contains(log, "survived") {
		t.Errorf("log %q, want the hog SIGKILLed (137)", log)
	}
	s, err := cgroups.Read(sb.CgroupsPath)
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
	sb := e.Start(t, 16<<20, oci.Options{
		Args:     runtimetest.Shell(`f() { sleep 1000 & f & }; f; exec sleep 1000`),
		CPUCount: 1, MemoryBytes: 128 << 20, PidsLimit: limit,
	})
	waitFor(t, "the pids limit to be hit", func() bool { return pidsMaxEvents(t, sb.CgroupsPath) > 0 })
	s, err := cgroups.Read(sb.CgroupsPath)
	if err != nil {
		t.Fatal(err)
	}
	if s.PidsCurrent == 0 || s.PidsCurrent > limit {
		t.Errorf("pids.current %d, limit %d", s.PidsCurrent, limit)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("host cannot fork: %v", err)
	}
	if err := e.RT.Kill(context.Background(), sb.ID); err != nil {
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
	sb := e.Prepare(b, 16<<20, oci.Options{Args: []string{"sleep", "1000"}, MemoryBytes: 64 << 20})
	e.BenchStartKill(b, sb)
}

// runc 1.2 and later fail `list` on a state root that does not exist yet (a
// server that never started a container); List reports no containers.
func TestListWithoutStateRoot(t *testing.T) {
	e := setup(t)
	if _, err := os.Stat(e.State); err == nil {
		t.Fatalf("state root %s exists before the first container", e.State)
	}
	got, err := e.RT.List(context.Background())
	if err != nil || len(got) != 0 {
		t.Fatalf("List = %v, %v; want none", got, err)
	}
}
