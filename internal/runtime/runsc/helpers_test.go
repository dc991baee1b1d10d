package runsc

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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/rootfs/testtree"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
)

// waitLimit bounds every wait for a condition inside a container.
const waitLimit = 30 * time.Second

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// runscBinary returns $CUBBY_RUNSC or the repository's bin/runsc, building it with
// `make runsc` when missing (about 2 min once). It skips the test only when the
// binary cannot be built.
func runscBinary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		if p := os.Getenv("CUBBY_RUNSC"); p != "" {
			buildPath = p
			return
		}
		root, err := filepath.Abs("../../..")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(root, "bin", "runsc")
		if _, err := os.Stat(buildPath); err == nil {
			return
		}
		out, err := exec.Command("make", "-C", root, "runsc").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out) + err.Error())
		}
	})
	if buildErr != nil {
		tb.Skipf("bin/runsc cannot be built (`make runsc`): %v", buildErr)
	}
	return buildPath
}

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
	bin := runscBinary(tb)
	base := tb.TempDir()
	e := &env{lower: filepath.Join(base, "lower"), base: base, state: filepath.Join(base, "state")}
	if err := testtree.Busybox(e.lower); err != nil {
		tb.Fatal(err)
	}
	e.rt = New(bin, e.state, Options{}, nil)
	e.fs = rootfs.New(filepath.Join(base, "cache"), nil)
	tb.Cleanup(func() {
		if err := e.rt.ReleaseRoot(); err != nil {
			tb.Error(err)
		}
	})
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
func (e *env) prepare(tb testing.TB, o oci.Options) *sandbox {
	tb.Helper()
	id := "cubby-" + suffix(tb)
	sb := &sandbox{id: id, dir: filepath.Join(e.base, id), log: filepath.Join(e.base, id+".log"),
		cgroupsPath: "/" + id}
	ctx := context.Background()
	rootfsDir, err := e.fs.Prepare(ctx, sb.dir, e.lower, 32<<20)
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
	if o.MemoryBytes == 0 {
		o.MemoryBytes = 256 << 20
	}
	spec, err := oci.Build(o)
	if err != nil {
		tb.Fatal(err)
	}
	if err := oci.WriteBundle(sb.dir, spec); err != nil {
		tb.Fatal(err)
	}
	return sb
}

func (e *env) start(t *testing.T, o oci.Options) *sandbox {
	t.Helper()
	sb := e.prepare(t, o)
	if err := e.rt.Start(context.Background(), sb.id, sb.dir, sb.log); err != nil {
		t.Fatal(err)
	}
	return sb
}

// assertGone checks that no runsc state, process, cgroup, mount, loop device or
// directory of sb is left.
func (e *env) assertGone(tb testing.TB, sb *sandbox) {
	tb.Helper()
	if _, err := e.rt.State(context.Background(), sb.id); !errors.Is(err, runtime.ErrNotFound) {
		tb.Errorf("runsc still knows %s: %v", sb.id, err)
	}
	if files, _ := filepath.Glob(filepath.Join(e.state, "*"+sb.id+"*")); len(files) > 0 {
		tb.Errorf("runsc state files left: %v", files)
	}
	if pids := processesOf(sb.id); len(pids) > 0 {
		tb.Errorf("runsc processes left: %v", pids)
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

// processesOf lists the pids whose command line names runsc and id (sandbox,
// gofer and CLI processes of the container).
func processesOf(id string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if slices.Contains(args, id) && strings.Contains(string(b), "runsc") {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	return pids
}

// waitFor polls cond until it holds, failing the test after waitLimit.
func waitFor(t testing.TB, what string, cond func() bool) {
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
func waitLog(t testing.TB, sb *sandbox, marker string) string {
	t.Helper()
	var log []byte
	waitFor(t, "log line "+marker, func() bool {
		log, _ = os.ReadFile(sb.log)
		return bytes.Contains(log, []byte(marker))
	})
	return string(log)
}

func shell(script string) []string { return []string{"sh", "-c", script} }

func medianMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}
