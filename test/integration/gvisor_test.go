package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/backend/local/leaks"
	"github.com/cubby-dev/cubby/internal/envdpb/process"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/runsc"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// gvisorEnv is a backendEnv with the gVisor runtime, with user namespaces
// (TestGVisorAPICheckpointCycles goes through `cubby serve --runtime runsc`).
type gvisorEnv struct {
	*backendEnv
	t  *testing.T
	rt *runsc.Runtime
}

func newGvisorEnv(t *testing.T) *gvisorEnv {
	t.Helper()
	runscBin := runscBinary(t)
	e := &gvisorEnv{t: t}
	e.backendEnv = newBackendEnv(t, "cbg", true, func(root string, log *slog.Logger) runtime.Runtime {
		e.rt = runsc.New(runscBin, root, runsc.Options{}, log)
		t.Cleanup(func() { _ = e.rt.ReleaseRoot() })
		return e.rt
	})
	return e
}

// gsandbox is a sandbox of the gVisor environment with an envd process client.
type gsandbox struct {
	id, token string
	e         *gvisorEnv
	proc      processconnect.ProcessClient
}

func (e *gvisorEnv) create(t *testing.T) *gsandbox {
	t.Helper()
	ctx := ctxT(t, 2*time.Minute)
	sb := &gsandbox{id: "t" + randHex(10)[:19], token: randHex(16), e: e}
	in, err := e.b.Create(ctx, backend.CreateRequest{
		SandboxID: sb.id, RootfsDir: e.lower, CPUCount: 1, MemoryMB: 512, DiskSizeMB: 512,
		Init: agentapi.InitRequest{AccessToken: sb.token, DefaultUser: "user", DefaultWorkdir: "/home/user"},
	})
	if err != nil {
		t.Fatalf("create on runsc: %v", err)
	}
	sb.connect(in)
	t.Cleanup(func() {
		_ = e.b.Kill(context.Background(), sb.id)
	})
	return sb
}

// connect points the process client at the instance's address, over a new
// connection pool (connections from before a pause do not survive it).
func (sb *gsandbox) connect(in backend.Instance) {
	hc := &http.Client{Transport: tokenTransport{sb.token, &http.Transport{}}}
	sb.proc = processconnect.NewProcessClient(hc, fmt.Sprintf("http://%s:%d", in.Addr, agentapi.EnvdPort), connect.WithProtoJSON())
}

type tokenTransport struct {
	token string
	base  *http.Transport
}

func (tt tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Access-Token", tt.token)
	return tt.base.RoundTrip(r)
}

// run executes a bash command in the sandbox and fails unless it exits 0.
func (sb *gsandbox) run(t *testing.T, cmd string) string {
	t.Helper()
	return execIn(t, sb.proc, cmd)
}

// execIn executes a bash command through an envd process client and fails tb
// unless it exits 0; it returns the output.
func execIn(tb testing.TB, proc processconnect.ProcessClient, cmd string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stdin := false
	stream, err := proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", cmd}}, Stdin: &stdin,
	}))
	if err != nil {
		tb.Fatalf("start %q: %v", cmd, err)
	}
	defer stream.Close()
	var out strings.Builder
	exit := int32(-100)
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			out.Write(d.GetStderr())
		}
		if end := ev.GetEnd(); end != nil {
			exit = end.GetExitCode()
		}
	}
	if err := stream.Err(); err != nil || exit != 0 {
		tb.Fatalf("%q: exit %d, %v, output %q", cmd, exit, err, out.String())
	}
	return out.String()
}

// pythonState starts a detached Python process holding a random token in a
// variable and a counter it writes with the token to ~/py every 50 ms.
func (sb *gsandbox) startPython(t *testing.T) {
	t.Helper()
	script := `import os, time
token = os.urandom(8).hex()
n = 0
while True:
    n += 1
    with open('/home/user/py.tmp', 'w') as f:
        f.write('%d %s %d' % (os.getpid(), token, n))
    os.replace('/home/user/py.tmp', '/home/user/py')
    time.sleep(0.05)
`
	sb.run(t, fmt.Sprintf("cat > /home/user/state.py <<'EOF'\n%sEOF\nsetsid python3 /home/user/state.py >/dev/null 2>&1 </dev/null & while [ ! -s /home/user/py ]; do sleep 0.05; done", script))
}

// pythonSnapshot returns "pid token" and the counter of the Python process.
func (sb *gsandbox) pythonSnapshot(t *testing.T) (string, int) {
	t.Helper()
	out := strings.Fields(sb.run(t, "cat /home/user/py"))
	if len(out) != 3 {
		t.Fatalf("py state = %q", out)
	}
	var n int
	fmt.Sscan(out[2], &n)
	return out[0] + " " + out[1], n
}

// waitCounterPast waits until the Python counter exceeds n (the process runs).
func (sb *gsandbox) waitCounterPast(t *testing.T, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, m := sb.pythonSnapshot(t)
		if got != id {
			t.Fatalf("python process changed: %q, want %q", got, id)
		}
		if m > n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("python counter stuck at %d", m)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settle re-scans id until ok accepts its resources (bounded wait).
func (e *gvisorEnv) settle(t *testing.T, id, what string, ok func(leaks.Resources) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := leaks.Scan(e.leakOptions(), id, netipZero)
		if err != nil {
			t.Fatal(err)
		}
		if ok(r) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gVisor sandbox %s %s: %s", id, what, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wantUnprivileged fails unless the gVisor sandbox and gofer processes of
// sandbox id run as the root of the id range leased to it (runsc creates the
// user namespace from the bundle's mapping), not as host root.
func (e *gvisorEnv) wantUnprivileged(t *testing.T, id string) {
	t.Helper()
	r, err := leaks.Scan(e.leakOptions(), id, netipZero)
	if err != nil || r.Lease == "" {
		t.Fatalf("no id range leased to %s: %v %s", id, err, r)
	}
	var found int
	for _, p := range r.Processes {
		pid, _, _ := strings.Cut(p, " ")
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil || !strings.Contains(p, "runsc-") {
			continue
		}
		for line := range strings.SplitSeq(string(status), "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" {
				found++
				if f[1] != r.Lease || f[2] != r.Lease {
					t.Errorf("%s runs as host uid %s, want the range's root %s", p, f[1], r.Lease)
				}
			}
		}
	}
	if found == 0 {
		t.Fatalf("no runsc process of %s found: %s", id, r)
	}
}

func stoppedOnDisk(r leaks.Resources) bool {
	return !r.Running() && r.Dir && len(r.Netns) == 1 && len(r.Veths) == 1 && len(r.Userns) == 1 && r.Lease != ""
}

// TestGVisorCheckpointCycles: pause on gVisor checkpoints to disk and frees the
// container (no runsc process, state, cgroup or mount left); every resume restores
// the same Python process with its variables and counter, and the files written
// each cycle (CUBBY_PAUSE_CYCLES, default 3; the bar is 100). A pause with
// memory=false on gVisor is a filesystem pause.
func TestGVisorCheckpointCycles(t *testing.T) {
	e := newGvisorEnv(t)
	sb := e.create(t)
	e.wantUnprivileged(t, sb.id)
	// The idmapped rootfs shows the template's owners inside; files written
	// inside keep the writer's id.
	if got := sb.run(t, "stat -c %u /usr/bin/sudo /root && touch /home/user/own && stat -c %u /home/user/own"); got != "0\n0\n1000\n" {
		t.Fatalf("owners inside gVisor: %q", got)
	}
	ctx := ctxT(t, 30*time.Minute)
	sb.startPython(t)
	proc, n := sb.pythonSnapshot(t)
	for i := 1; i <= pauseCycles(t); i++ {
		sb.run(t, fmt.Sprintf("echo c%d > /home/user/c%d", i, i))
		mode, err := e.b.Pause(ctx, sb.id, backend.PauseOptions{KeepMemory: true})
		if err != nil || mode != backend.PauseCheckpoint {
			t.Fatalf("cycle %d: pause = %q, %v", i, mode, err)
		}
		e.settle(t, sb.id, "checkpointed holds", stoppedOnDisk)
		if _, err := e.b.Pause(ctx, sb.id, backend.PauseOptions{KeepMemory: true}); !errors.Is(err, backend.ErrPaused) {
			t.Fatalf("second pause: %v", err)
		}
		in, err := e.b.Resume(ctx, sb.id)
		if err != nil || in.Paused {
			t.Fatalf("cycle %d: resume = %+v, %v", i, in, err)
		}
		sb.connect(in)
		sb.waitCounterPast(t, proc, n)
		_, n = sb.pythonSnapshot(t)
		want := ""
		for j := 1; j <= i; j++ {
			want += fmt.Sprintf("c%d\n", j)
		}
		if got := sb.run(t, "cat $(ls -v /home/user/c*)"); got != want {
			t.Fatalf("cycle %d: files %q, want %q", i, got, want)
		}
	}

	mode, err := e.b.Pause(ctx, sb.id, backend.PauseOptions{KeepMemory: false})
	if err != nil || mode != backend.PauseFilesystem {
		t.Fatalf("memory=false pause on gVisor = %q, %v", mode, err)
	}
	e.settle(t, sb.id, "filesystem-paused holds", stoppedOnDisk)
	in, err := e.b.Resume(ctx, sb.id)
	if err != nil {
		t.Fatalf("resume from filesystem pause: %v", err)
	}
	sb.connect(in)
	if got := sb.run(t, "cat /home/user/c1; pgrep -f '[s]tate[.]py' || echo none"); got != "c1\nnone\n" {
		t.Fatalf("after filesystem pause: %q (files kept, Python gone expected)", got)
	}
	// Killing a checkpointed sandbox frees its image with everything else.
	if _, err := e.b.Pause(ctx, sb.id, backend.PauseOptions{KeepMemory: true}); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Kill(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	e.settle(t, sb.id, "leaked", leaks.Resources.Empty)
}

// TestGVisorCheckpointDiskFull: a checkpoint that runs out of disk fails cleanly:
// the sandbox keeps running with its process and state, and a later pause works.
func TestGVisorCheckpointDiskFull(t *testing.T) {
	e := newGvisorEnv(t)
	sb := e.create(t)
	ctx := ctxT(t, 5*time.Minute)
	sb.startPython(t)
	proc, n := sb.pythonSnapshot(t)
	img := filepath.Join(e.dir, "sandboxes", sb.id, "checkpoint")
	if err := os.MkdirAll(img, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", img, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatal(err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = unix.Unmount(img, unix.MNT_DETACH)
		}
	})
	if _, err := e.b.Pause(ctx, sb.id, backend.PauseOptions{KeepMemory: true}); err == nil {
		t.Fatal("checkpoint into a 256 KiB tmpfs succeeded")
	} else {
		t.Logf("pause failed as expected: %v", err)
	}
	in, err := e.b.Lookup(ctx, sb.id)
	if err != nil || in.Paused {
		t.Fatalf("after failed pause: %+v, %v", in, err)
	}
	sb.connect(in)
	sb.waitCounterPast(t, proc, n)
	// runsc may still hold the partial image open: detach the full tmpfs lazily.
	if err := unix.Unmount(img, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	mounted = false
	if mode, err := e.b.Pause(ctx, sb.id, backend.PauseOptions{KeepMemory: true}); err != nil || mode != backend.PauseCheckpoint {
		t.Fatalf("pause after freeing space = %q, %v", mode, err)
	}
	if in, err = e.b.Resume(ctx, sb.id); err != nil {
		t.Fatal(err)
	}
	sb.connect(in)
	_, n = sb.pythonSnapshot(t)
	sb.waitCounterPast(t, proc, n)
}

// TestGVisorRecover: a new backend (as after SIGKILL of the server) re-adopts a
// running, a checkpointed and a filesystem-paused gVisor sandbox with their true
// state; the checkpointed one resumes with its Python process intact; killing
// them all leaves nothing behind.
func TestGVisorRecover(t *testing.T) {
	e := newGvisorEnv(t)
	ctx := ctxT(t, 5*time.Minute)
	running, ckpt, fs := e.create(t), e.create(t), e.create(t)
	for _, sb := range []*gsandbox{running, ckpt, fs} {
		sb.run(t, "echo "+sb.id+" > /home/user/me")
	}
	ckpt.startPython(t)
	proc, n := ckpt.pythonSnapshot(t)
	if _, err := e.b.Pause(ctx, ckpt.id, backend.PauseOptions{KeepMemory: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.b.Pause(ctx, fs.id, backend.PauseOptions{KeepMemory: false}); err != nil {
		t.Fatal(err)
	}
	_ = e.b.Close() // the old server is gone; its watchers stop acting
	e.b = e.newBackend(slog.New(slog.DiscardHandler))
	insts, err := e.b.Recover(ctx, []string{running.id, ckpt.id, fs.id})
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	got := map[string]backend.PauseMode{}
	for _, in := range insts {
		got[in.SandboxID] = in.PauseMode
	}
	want := map[string]backend.PauseMode{running.id: "", ckpt.id: backend.PauseCheckpoint, fs.id: backend.PauseFilesystem}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("recovered %v, want %v", got, want)
	}
	for _, in := range insts {
		if in.SandboxID == running.id {
			running.connect(in)
		}
	}
	running.run(t, "cat /home/user/me")
	for _, sb := range []*gsandbox{ckpt, fs} {
		in, err := e.b.Resume(ctx, sb.id)
		if err != nil {
			t.Fatalf("resume %s after recovery: %v", sb.id, err)
		}
		sb.connect(in)
		if got := sb.run(t, "cat /home/user/me"); got != sb.id+"\n" {
			t.Fatalf("file after recovery: %q", got)
		}
	}
	ckpt.waitCounterPast(t, proc, n)
	for _, sb := range []*gsandbox{running, ckpt, fs} {
		if err := e.b.Kill(ctx, sb.id); err != nil {
			t.Fatal(err)
		}
		e.settle(t, sb.id, "leaked", leaks.Resources.Empty)
	}
}

// runscBinary returns bin/runsc of the repository (or CUBBY_RUNSC), skipping the
// test with how to build it when it is absent.
func runscBinary(t *testing.T) string { return repoBinary(t, "runsc", "CUBBY_RUNSC") }

// repoBinary returns $env, else bin/<name> of the repository, skipping tb with
// how to build it when it is absent.
func repoBinary(tb testing.TB, name, env string) string {
	tb.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	root, err := testserver.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(root, "bin", name)
	if _, err := os.Stat(p); err != nil {
		tb.Skipf("needs bin/%s, build it with `make %s`: %v", name, name, err)
	}
	return p
}

// startPythonAPI starts, through envd, a detached Python process holding a random
// token in a variable and writing "pid token counter" to ~/py every 50 ms.
func (sb *sandbox) startPythonAPI(ctx context.Context, t *testing.T) {
	t.Helper()
	script := `import os, time
token = os.urandom(8).hex()
n = 0
while True:
    n += 1
    with open('/home/user/py.tmp', 'w') as f:
        f.write('%d %s %d' % (os.getpid(), token, n))
    os.replace('/home/user/py.tmp', '/home/user/py')
    time.sleep(0.05)
`
	sb.mustRun(ctx, t, fmt.Sprintf("cat > /home/user/state.py <<'EOF'\n%sEOF\nsetsid python3 /home/user/state.py >/dev/null 2>&1 </dev/null & while [ ! -s /home/user/py ]; do sleep 0.05; done; echo ok", script), "ok\n")
}

// pythonAPI returns "pid token" and the counter of the Python process.
func (sb *sandbox) pythonAPI(ctx context.Context, t *testing.T) (string, int) {
	t.Helper()
	out := strings.Fields(sb.mustRun(ctx, t, "cat /home/user/py", ""))
	if len(out) != 3 {
		t.Fatalf("py state = %q", out)
	}
	var n int
	fmt.Sscan(out[2], &n)
	return out[0] + " " + out[1], n
}

// waitPythonPast waits (bounded) until the Python process named id has counted
// past n, i.e. the same process with the same variables runs again.
func (sb *sandbox) waitPythonPast(ctx context.Context, t *testing.T, id string, n int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, m := sb.pythonAPI(ctx, t)
		if got != id {
			t.Fatalf("python process or variable changed: %q, want %q", got, id)
		}
		if m > n {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("python counter stuck at %d", m)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestGVisorAPICheckpointCycles drives gVisor through the HTTP API: a server
// started with --runtime runsc creates a sandbox; a file and a Python variable
// (held by a running process) are written; POST pause checkpoints it (getInfo
// pauseMode "full" by checkpoint, 502 on the sandbox side, 409 on a second pause, no
// container left); connect restores it with the same process, variable and files,
// for CUBBY_PAUSE_CYCLES cycles. Killing it leaves nothing behind.
func TestGVisorAPICheckpointCycles(t *testing.T) {
	runscBin := runscBinary(t)
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbgt",
		Args: []string{"--domain", "cubby.test", "--runtime", "runsc", "--runsc", runscBin}})
	s := &server{Server: ts, t: t}
	t.Cleanup(func() { releaseNullNetns(t, ts, runscBin) })
	sb := s.create(t, map[string]any{"timeout": 600})
	ctx := ctxT(t, 30*time.Minute)
	sb.mustRun(ctx, t, `echo c0 > /home/user/c0 && echo ok`, "ok\n")
	sb.startPythonAPI(ctx, t)
	proc, n := sb.pythonAPI(ctx, t)
	for i := 1; i <= pauseCycles(t); i++ {
		sb.mustRun(ctx, t, fmt.Sprintf("echo c%d > /home/user/c%d && echo ok", i, i), "ok\n")
		sb.pause(t, map[string]any{})
		sb.checkPaused(t, "checkpoint")
		s.wantStopped(t, sb.ID)
		if code := sb.connect(t, 600); code != 201 {
			t.Fatalf("cycle %d: connect = %d, want 201\n%s", i, code, s.log())
		}
		if in := sb.info(t); in.State != "running" || in.mode() != "" {
			t.Fatalf("cycle %d: after resume %+v", i, in)
		}
		n = sb.waitPythonPast(ctx, t, proc, n)
		want := ""
		for j := 0; j <= i; j++ {
			want += fmt.Sprintf("c%d\n", j)
		}
		sb.mustRun(ctx, t, "cat $(ls -v /home/user/c*)", want)
	}
	if r := s.resources(t, sb.ID, netipZero); len(r.Mounts) == 0 || len(r.Cgroups) == 0 || len(r.States) == 0 ||
		len(r.Processes) == 0 || len(r.Netns) != 1 || len(r.Veths) != 1 {
		t.Fatalf("resumed gVisor sandbox %s lacks resources: %s", sb.ID, r)
	}
	sb.pause(t, map[string]any{})
	if code := s.api("DELETE", "/sandboxes/"+sb.ID, nil, nil); code != 204 {
		t.Fatalf("kill checkpointed: %d", code)
	}
	s.wantGone(t, sb.ID)
	if code := sb.connect(t, 60); code != 404 {
		t.Fatalf("connect killed = %d, want 404", code)
	}
}

// releaseNullNetns stops the server and unmounts the "null-netns" bind mount
// runsc keeps in <data>/runsc (server-wide, shared by all gVisor sandboxes), so
// the data directory can be removed. A server that stops gracefully should have
// released it already; that it did not is logged, not failed (it is not a
// per-sandbox resource and a SIGKILLed server cannot release it either).
func releaseNullNetns(t *testing.T, ts *testserver.Server, runscBin string) {
	ts.Stop()
	root := filepath.Join(ts.DataDir, "runsc")
	if err := unix.Unmount(filepath.Join(root, "null-netns"), unix.MNT_DETACH); err == nil {
		t.Logf("cubby serve left %s/null-netns mounted after a graceful stop (runsc.Runtime.ReleaseRoot not called at shutdown)", root)
	}
	if err := runsc.New(runscBin, root, runsc.Options{}, slog.New(slog.DiscardHandler)).ReleaseRoot(); err != nil {
		t.Error(err)
	}
}

var netipZero netip.Addr

func mustPrefix(t testing.TB, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
