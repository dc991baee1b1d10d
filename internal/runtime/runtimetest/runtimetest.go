// Package runtimetest is the conformance suite of runtime.Runtime: the checks
// every runtime must pass (CheckRunning, CheckPauseResume, CheckKillPaused,
// CheckStartFailure), the benchmark of its start and kill (BenchStartKill),
// and the environment they run in: a busybox template and rootfs manager under
// a temporary directory, sandboxes with an OCI bundle whose clean-up checks that
// nothing of them is left on the host (AssertGone), and polling helpers. The
// runc and runsc packages run it against the pinned binaries (Tool); a new
// runtime's tests start from NewEnv. Tests need root.
package runtimetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
	"github.com/cubby-dev/cubby/internal/testenv/testrootfs"
)

// tools caches Tool's result per binary name for the test binary's life.
var tools = struct {
	sync.Mutex
	paths map[string]string
	errs  map[string]error
}{paths: map[string]string{}, errs: map[string]error{}}

// Tool returns $env, else the repository's bin/<name> (a pinned OCI runtime:
// "runc", "runsc"), building it with `make <name>` when missing (once per test
// binary). It skips tb only when the binary cannot be built.
func Tool(tb testing.TB, name, env string) string {
	tb.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	tools.Lock()
	defer tools.Unlock()
	if _, ok := tools.paths[name]; !ok {
		tools.paths[name], tools.errs[name] = buildTool(name)
	}
	if err := tools.errs[name]; err != nil {
		tb.Skipf("bin/%s cannot be built (`make %s`): %v", name, name, err)
	}
	return tools.paths[name]
}

// buildTool returns bin/<name> of the repository holding the working
// directory, running `make <name>` there when it is missing.
func buildTool(name string) (string, error) {
	root, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		if filepath.Dir(root) == root {
			return "", errors.New("no go.mod above the working directory")
		}
		root = filepath.Dir(root)
	}
	p := filepath.Join(root, "bin", name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if out, err := exec.Command("make", "-C", root, name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s: %w", out, err)
	}
	return p, nil
}

// Env is one test's runtime R with its state root, a busybox template and a
// rootfs manager, all under the test's temporary directory.
type Env[R runtime.Runtime] struct {
	RT    R
	FS    *rootfs.Manager
	Lower string // busybox template (lower dir of every sandbox)
	Base  string // the test's temporary directory
	State string // the runtime's state root, Base/state
	// CheckProcesses makes AssertGone also fail on processes whose command line
	// names RT.Name() and the sandbox ID (runsc's sandbox and gofer processes).
	CheckProcesses bool
}

// Sandbox is a prepared bundle: ID "cubby-t<8 hex>", bundle directory Dir, log file
// Log (Out is it opened for appending, given to the runtime as the container's
// stdout and stderr) and cgroup path "/<ID>".
type Sandbox struct {
	ID, Dir, Log, CgroupsPath string
	Out                       *os.File
}

// NewEnv skips the test unless it runs as root, then builds the Env: newRT
// returns the runtime for the state root (it may skip the test, and its
// clean-ups run before the temporary directory is removed).
func NewEnv[R runtime.Runtime](tb testing.TB, newRT func(tb testing.TB, stateRoot string) R) *Env[R] {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root")
	}
	base := tb.TempDir()
	e := &Env[R]{Lower: filepath.Join(base, "lower"), Base: base, State: filepath.Join(base, "state")}
	e.RT = newRT(tb, e.State)
	if err := testrootfs.Busybox(e.Lower); err != nil {
		tb.Fatal(err)
	}
	e.FS = rootfs.New(filepath.Join(base, "cache"), nil)
	return e
}

// Suffix returns "t" and 8 random hex digits, for unique host resource names.
func Suffix(tb testing.TB) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

// Prepare mounts a rootfs of disk bytes and writes the bundle of a new sandbox
// running o (ID, RootfsDir and CgroupsPath are filled in); its clean-up kills it,
// releases the rootfs and runs AssertGone.
func (e *Env[R]) Prepare(tb testing.TB, disk int64, o oci.Options) *Sandbox {
	tb.Helper()
	id := "cubby-" + Suffix(tb)
	sb := &Sandbox{ID: id, Dir: filepath.Join(e.Base, id), Log: filepath.Join(e.Base, id+".log"),
		CgroupsPath: "/" + id}
	ctx := context.Background()
	out, err := os.OpenFile(sb.Log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	sb.Out = out
	rootfsDir, err := e.FS.Prepare(ctx, rootfs.Disk{Dir: sb.Dir}, e.Lower, disk)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		defer out.Close()
		if err := e.RT.Kill(ctx, id); err != nil {
			tb.Errorf("cleanup kill: %v", err)
		}
		if err := e.FS.Release(ctx, rootfs.Disk{Dir: sb.Dir}); err != nil {
			tb.Errorf("cleanup release: %v", err)
		}
		e.AssertGone(tb, sb)
	})
	o.ID, o.RootfsDir, o.CgroupsPath = id, rootfsDir, sb.CgroupsPath
	spec, err := oci.Build(o)
	if err != nil {
		tb.Fatal(err)
	}
	if err := oci.WriteBundle(sb.Dir, spec); err != nil {
		tb.Fatal(err)
	}
	return sb
}

// Start prepares a sandbox as Prepare does and starts it.
func (e *Env[R]) Start(tb testing.TB, disk int64, o oci.Options) *Sandbox {
	tb.Helper()
	sb := e.Prepare(tb, disk, o)
	if err := e.RT.Start(context.Background(), sb.ID, sb.Dir, sb.Out); err != nil {
		tb.Fatal(err)
	}
	return sb
}

// AssertGone checks that no runtime state, state file, cgroup, mount, loop device
// or directory of sb is left (and no process, with CheckProcesses).
func (e *Env[R]) AssertGone(tb testing.TB, sb *Sandbox) {
	tb.Helper()
	name := e.RT.Name()
	if _, err := e.RT.State(context.Background(), sb.ID); !errors.Is(err, runtime.ErrNotFound) {
		tb.Errorf("%s still knows %s: %v", name, sb.ID, err)
	}
	if files, _ := filepath.Glob(filepath.Join(e.State, "*"+sb.ID+"*")); len(files) > 0 {
		tb.Errorf("%s state files left: %v", name, files)
	}
	if pids := ProcessesOf(name, sb.ID); e.CheckProcesses && len(pids) > 0 {
		tb.Errorf("%s processes left: %v", name, pids)
	}
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		tb.Fatal(err)
	}
	for _, m := range mounts {
		if m.FSType == "cgroup" || m.FSType == "cgroup2" {
			if _, err := os.Stat(filepath.Join(m.Point, sb.CgroupsPath)); !errors.Is(err, os.ErrNotExist) {
				tb.Errorf("cgroup left in %s: %v", m.Point, err)
			}
		}
		if strings.HasPrefix(m.Point, sb.Dir) {
			tb.Errorf("mount left: %s", m.Point)
		}
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, _ := os.ReadFile(f); bytes.Contains(b, []byte(sb.Dir)) {
			tb.Errorf("loop device left: %s -> %s", f, b)
		}
	}
	if _, err := os.Stat(sb.Dir); !errors.Is(err, os.ErrNotExist) {
		tb.Errorf("sandbox dir left: %v", err)
	}
}

// ProcessesOf lists the pids whose command line has the argument id and
// mentions binaryName (e.g. runsc's sandbox, gofer and CLI processes of id).
func ProcessesOf(binaryName, id string) []string {
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if slices.Contains(args, id) && strings.Contains(string(b), binaryName) {
			pids = append(pids, filepath.Base(filepath.Dir(f)))
		}
	}
	return pids
}

// WaitFor polls cond every 5 ms until it holds, failing the test after limit.
func WaitFor(tb testing.TB, limit time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitLog waits (at most limit) until the log of sb contains marker and returns
// the log.
func WaitLog(tb testing.TB, limit time.Duration, sb *Sandbox, marker string) string {
	tb.Helper()
	var log []byte
	WaitFor(tb, limit, "log line "+marker, func() bool {
		log, _ = os.ReadFile(sb.Log)
		return bytes.Contains(log, []byte(marker))
	})
	return string(log)
}

// Shell returns the process args running script with busybox sh -c.
func Shell(script string) []string { return []string{"sh", "-c", script} }

// IsZombie reports whether pid is a zombie, or gone (its /proc/pid/stat unreadable).
func IsZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

// MedianMs returns the median of ds in milliseconds, 0 for none.
func MedianMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}

// CheckRunning checks that State of the started sb reports it running with its ID,
// bundle and a pid, and that List includes it; it returns the state.
func (e *Env[R]) CheckRunning(t *testing.T, sb *Sandbox) runtime.State {
	t.Helper()
	ctx := context.Background()
	st, err := e.RT.State(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != runtime.StatusRunning || st.Pid <= 0 || st.Bundle != sb.Dir || st.ID != sb.ID {
		t.Fatalf("state %+v", st)
	}
	list, err := e.RT.List(ctx)
	if err != nil || !slices.ContainsFunc(list, func(s runtime.State) bool { return s.ID == sb.ID }) {
		t.Errorf("List = %+v, %v", list, err)
	}
	return st
}

// CheckPauseResume pauses sb, checks State says paused, calls whilePaused (if
// not nil), resumes it and checks State says running.
func (e *Env[R]) CheckPauseResume(t *testing.T, sb *Sandbox, whilePaused func()) {
	t.Helper()
	ctx := context.Background()
	if err := e.RT.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.RT.State(ctx, sb.ID); st.Status != runtime.StatusPaused {
		t.Errorf("after pause: %+v", st)
	}
	if whilePaused != nil {
		whilePaused()
	}
	if err := e.RT.Resume(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if st, _ := e.RT.State(ctx, sb.ID); st.Status != runtime.StatusRunning {
		t.Errorf("after resume: %+v", st)
	}
}

// CheckKillPaused pauses the running sb, kills it and checks that its process pid
// is gone, that it is unknown afterwards, that a second Kill returns nil and that
// Pause of it returns runtime.ErrNotFound.
func (e *Env[R]) CheckKillPaused(t *testing.T, sb *Sandbox, pid int) {
	t.Helper()
	ctx := context.Background()
	if err := e.RT.Pause(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.RT.Kill(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) && !IsZombie(pid) {
		t.Errorf("pid %d still alive after Kill: %v", pid, err)
	}
	if _, err := e.RT.State(ctx, sb.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("State after Kill: %v", err)
	}
	if err := e.RT.Kill(ctx, sb.ID); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if err := e.RT.Pause(ctx, sb.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Pause of unknown: %v", err)
	}
}

// CheckStartFailure checks that Start of a bundle whose process binary is missing
// fails with the runtime's "no such file" message and leaves no container, and
// that Start refuses an invalid ID.
func (e *Env[R]) CheckStartFailure(t *testing.T, disk int64, o oci.Options) {
	t.Helper()
	o.Args = []string{"/no/such/binary"}
	sb := e.Prepare(t, disk, o)
	err := e.RT.Start(context.Background(), sb.ID, sb.Dir, sb.Out)
	if err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
	if !strings.Contains(err.Error(), "no such file") {
		t.Errorf("error does not carry %s's message: %v", e.RT.Name(), err)
	}
	if _, err := e.RT.State(context.Background(), sb.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("container left after failed Start: %v", err)
	}
	if err := e.RT.Start(context.Background(), "-bad", sb.Dir, sb.Out); err == nil {
		t.Error("invalid id accepted")
	}
}

// BenchStartKill measures Start and Kill of the prepared sb, reporting the
// medians in ms as "start-ms" and "kill-ms".
func (e *Env[R]) BenchStartKill(b *testing.B, sb *Sandbox) {
	ctx := context.Background()
	var starts, kills []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := e.RT.Start(ctx, sb.ID, sb.Dir, sb.Out); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := e.RT.Kill(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		starts, kills = append(starts, t1.Sub(t0)), append(kills, time.Since(t1))
	}
	b.ReportMetric(MedianMs(starts), "start-ms")
	b.ReportMetric(MedianMs(kills), "kill-ms")
}
