package jupyter

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// countingLauncher execs the kernel like the cold path, counting launches, or
// (dying) execs a shell that exits at once, or (refuse) fails every launch.
type countingLauncher struct {
	calls  atomic.Int32
	dying  bool
	refuse bool
}

func (l *countingLauncher) Launch(_ context.Context, req LaunchRequest) (Process, error) {
	l.calls.Add(1)
	switch {
	case l.refuse:
		return nil, errors.New("refused")
	case l.dying:
		req.Argv = []string{"/bin/sh", "-c", "exit 7"}
	}
	return execLaunch(req)
}

func TestLauncherUsedForStartAndRestart(t *testing.T) {
	l := &countingLauncher{}
	k := startPython(t, func(o *Options) { o.Launcher = l })
	run(t, k, "v = 1")
	if err := k.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, _ := run(t, k, "v"); r.Ename != "NameError" {
		t.Fatalf("after restart: %+v", r)
	}
	if n := l.calls.Load(); n != 2 {
		t.Fatalf("launcher called %d times, want 2 (start, restart)", n)
	}
}

func TestLauncherFailureFallsBackToExec(t *testing.T) {
	for _, l := range []*countingLauncher{{refuse: true}, {dying: true}} {
		k := startPython(t, func(o *Options) { o.Launcher = l })
		if r, c := run(t, k, "1 + 1"); r.Status != "ok" || !resultContains(c, "2") {
			t.Fatalf("fallback kernel (refuse=%v dying=%v): %+v", l.refuse, l.dying, r)
		}
		if n := l.calls.Load(); n != 1 {
			t.Fatalf("launcher called %d times, want 1", n)
		}
	}
}
