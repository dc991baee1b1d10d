package jupyter

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/cgroups"
	"github.com/cubby-dev/cubby/internal/testenv/testcgroup"
)

// cgroupLauncher execs the kernel inside a v1 memory cgroup: sh writes itself
// into cgroup.procs, then execs the kernel argv (same pid, same process group).
type cgroupLauncher struct{ dir string }

func (l cgroupLauncher) Launch(_ context.Context, req LaunchRequest) (Process, error) {
	req.Argv = append([]string{"sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, l.dir}, req.Argv...)
	return execLaunch(req)
}

// TestOOMKillReported: a kernel in a 96 MiB cgroup allocates past the limit; the
// execution fails with an *OOMError naming the limit, and the next execution
// runs on a fresh kernel. A plain SIGKILL stays a plain kernel death.
func TestOOMKillReported(t *testing.T) {
	const limit = 96 << 20
	dir := testcgroup.NewV1Memory(t, "oom", limit)
	cg, err := cgroups.OpenMemory(dir)
	if err != nil {
		t.Fatal(err)
	}
	k := startPython(t, func(o *Options) { o.Launcher = cgroupLauncher{dir: dir}; o.OOM = cg })
	if got, err := cgroups.MemoryOf(k.Pid()); err != nil || got.Dir() != dir {
		t.Fatalf("kernel not in the test cgroup: %+v, %v", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hog := "chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 20))\n"
	_, err = k.Execute(ctx, ExecuteRequest{Code: hog}, nil)
	var oe *OOMError
	if !errors.Is(err, ErrOutOfMemory) || !errors.Is(err, ErrKernelDied) || !errors.As(err, &oe) || oe.LimitBytes != limit {
		t.Fatalf("Execute(hog) err = %v, want an OOMError with limit %d", err, limit)
	}
	if !strings.Contains(err.Error(), "killed by the out-of-memory killer (memory limit 96 MiB)") {
		t.Fatalf("error text %q", err.Error())
	}
	if n, _ := cg.OOMKills(); n == 0 {
		t.Fatalf("cgroup counted no OOM kill")
	}

	var c collector
	if r, err := k.Execute(ctx, ExecuteRequest{Code: "print(6*7)"}, c.on); err != nil || r.Status != "ok" || c.stream("stdout") != "42\n" {
		t.Fatalf("after OOM: %+v, %v, %q", r, err, c.stream("stdout"))
	}
	_, err = k.Execute(ctx, ExecuteRequest{Code: "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"}, nil)
	if !errors.Is(err, ErrKernelDied) || errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("SIGKILL without OOM: err = %v, want a plain kernel death", err)
	}
}
