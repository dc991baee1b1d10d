package zygote

import (
	"context"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/jupyter"
)

// pythonArgs are the flags the interpreter service passes too.
var pythonArgs = []string{"--InteractiveShell.colors=NoColor", "--HistoryManager.enabled=False"}

// pythonSpec returns the host's ipykernel kernelspec (python3-ipykernel) or skips.
func pythonSpec(t testing.TB) *jupyter.KernelSpec {
	t.Helper()
	ks, err := jupyter.LookupKernelSpec(jupyter.KernelSpecDirs("", ""), "python3")
	if err != nil {
		t.Skipf("ipykernel not installed (apt-get install python3-ipykernel): %v", err)
	}
	return ks
}

func startServer(t testing.TB, mod func(*Config)) *Server {
	t.Helper()
	cfg := Config{Python: pythonSpec(t).Argv[0], Env: []string{"PATH=/usr/bin:/bin", "ZYGOTE_ONLY=1"},
		LogPath: filepath.Join(t.TempDir(), "zygote.log")}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var (
	sharedOnce   sync.Once
	sharedServer *Server
	sharedErr    error
)

// shared returns one server (default preload: the data stack when installed)
// reused by the tests; TestMain closes it.
func shared(t *testing.T) *Server {
	t.Helper()
	spec := pythonSpec(t)
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		sharedServer, sharedErr = Start(ctx, Config{Python: spec.Argv[0],
			Env: []string{"PATH=/usr/bin:/bin", "ZYGOTE_ONLY=1"}})
	})
	if sharedErr != nil {
		t.Fatalf("Start: %v", sharedErr)
	}
	return sharedServer
}

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedServer != nil {
		sharedServer.Close()
	}
	os.Exit(code)
}

// startKernel starts a kernel through launcher, closed when the test ends.
func startKernel(t *testing.T, launcher jupyter.Launcher, mod func(*jupyter.Options)) *jupyter.Kernel {
	t.Helper()
	o := jupyter.Options{ExtraArgs: pythonArgs, RuntimeDir: t.TempDir(), InterruptGrace: 10 * time.Second,
		Launcher: launcher, Env: []string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir()}}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := jupyter.Start(ctx, pythonSpec(t), o)
	if err != nil {
		t.Fatalf("jupyter.Start: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// parentOf reads the parent pid of pid from /proc.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func requireForked(t *testing.T, k *jupyter.Kernel, s *Server) {
	t.Helper()
	if ppid := parentOf(t, k.Pid()); ppid != s.Pid() {
		t.Fatalf("kernel %d has parent %d, want the fork server %d", k.Pid(), ppid, s.Pid())
	}
}

// run executes code and returns the reply and the text/plain result and stdout.
func run(t *testing.T, k *jupyter.Kernel, code string) (jupyter.Reply, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var result, stdout strings.Builder
	on := func(m *jupyter.Message) {
		var c struct {
			Name, Text string
			Data       map[string]any `json:"data"`
		}
		m.Decode(&c)
		switch m.Type() {
		case "execute_result":
			result.WriteString(c.Data["text/plain"].(string))
		case "stream":
			if c.Name == "stdout" {
				stdout.WriteString(c.Text)
			}
		}
	}
	r, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: code, StoreHistory: true}, on)
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return r, result.String(), stdout.String()
}

func TestForkedKernelMessageFlow(t *testing.T) {
	s := shared(t)
	k := startKernel(t, s, nil)
	requireForked(t, k, s)
	if info := k.Info(); info.LanguageInfo.Name != "python" || info.Implementation != "ipython" {
		t.Fatalf("kernel info = %+v", info)
	}
	r1, _, _ := run(t, k, "x = 1")
	r2, res, _ := run(t, k, "x += 1; x")
	if r1.Status != "ok" || r1.ExecutionCount != 1 || r2.Status != "ok" || r2.ExecutionCount != 2 || res != "2" {
		t.Fatalf("replies %+v %+v result %q", r1, r2, res)
	}
	r, _, _ := run(t, k, "1/0")
	if r.Status != "error" || r.Ename != "ZeroDivisionError" || strings.Contains(strings.Join(r.Traceback, ""), "\x1b[") {
		t.Fatalf("error reply = %+v", r)
	}
	if r, _, _ := run(t, k, "input()"); r.Ename != "StdinNotImplementedError" {
		t.Fatalf("input() reply = %+v", r)
	}
}

func TestForkedKernelInterruptKeepsState(t *testing.T) {
	s := shared(t)
	k := startKernel(t, s, nil)
	run(t, k, "kept = 42")
	ctx, cancel := context.WithCancel(context.Background())
	on := func(m *jupyter.Message) {
		if m.Type() == "stream" {
			cancel()
		}
	}
	r, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(100)"}, on)
	if !errors.Is(err, context.Canceled) || r.Ename != "KeyboardInterrupt" {
		t.Fatalf("interrupted execution: %+v %v", r, err)
	}
	if _, res, _ := run(t, k, "kept"); res != "42" {
		t.Fatalf("state after interrupt = %q", res)
	}
}

func TestForkedKernelDeathAndRestart(t *testing.T) {
	s := shared(t)
	k := startKernel(t, s, nil)
	run(t, k, "state = 1")
	pid := k.Pid()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: "import os, time\ntime.sleep(0.2)\nos._exit(3)"}, nil)
	if !errors.Is(err, jupyter.ErrKernelDied) {
		t.Fatalf("err = %v, want ErrKernelDied", err)
	}
	if _, res, _ := run(t, k, "'state' in globals()"); res != "False" {
		t.Fatalf("after death: %q", res)
	}
	if k.Pid() == pid {
		t.Fatal("pid unchanged after death")
	}
	requireForked(t, k, s)
	run(t, k, "v = 1")
	pid = k.Pid()
	if err := k.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	requireForked(t, k, s)
	if r, _, _ := run(t, k, "v"); r.Ename != "NameError" {
		t.Fatalf("after restart: %+v", r)
	}
	if syscall.Kill(pid, 0) == nil && parentOf(t, pid) == s.Pid() {
		// The server reaps asynchronously; the process must at least be gone.
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); !strings.Contains(string(b), ") Z ") {
			t.Fatalf("old kernel %d still running after restart", pid)
		}
	}
}

func TestKernelsDoNotShareStateOrRandomStreams(t *testing.T) {
	s := shared(t)
	a, b := startKernel(t, s, nil), startKernel(t, s, nil)
	requireForked(t, a, s)
	requireForked(t, b, s)
	code := "import random, os\nr = [random.random(), os.getpid()]\n"
	if contains(s.Info().Preloaded, "numpy") {
		code += "import numpy\nr.append(float(numpy.random.rand()))\n"
	}
	code += "r"
	_, ra, _ := run(t, a, "only_a = 1\n"+code)
	_, rb, _ := run(t, b, code)
	for i, x := range strings.Split(strings.Trim(ra, "[]"), ",") {
		if y := strings.Split(strings.Trim(rb, "[]"), ",")[i]; x == y {
			t.Fatalf("kernels share value %d: %s vs %s", i, ra, rb)
		}
	}
	if _, res, _ := run(t, b, "'only_a' in globals()"); res != "False" {
		t.Fatal("state leaked between forked kernels")
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func TestPerKernelEnvCwdAndLog(t *testing.T) {
	s := shared(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	logA := filepath.Join(t.TempDir(), "a.log")
	a := startKernel(t, s, func(o *jupyter.Options) {
		o.Dir, o.Env, o.LogPath = dirA, []string{"PATH=/usr/bin:/bin", "CUBBY_T=a", "TMPDIR=" + dirA}, logA
	})
	b := startKernel(t, s, func(o *jupyter.Options) {
		o.Dir, o.Env = dirB, []string{"PATH=/usr/bin:/bin", "CUBBY_T=b", "PYTHONPATH=" + dirB}
	})
	code := "import os, sys, tempfile\nprint(os.getcwd(), os.environ.get('CUBBY_T'), os.environ.get('ZYGOTE_ONLY'), " +
		"sys.path[0], tempfile.gettempdir(), sys.path[1])\nos.system('echo to-fd1')"
	_, _, outA := run(t, a, code)
	_, _, outB := run(t, b, code)
	fa, fb := strings.Fields(outA), strings.Fields(outB)
	if len(fa) < 5 || fa[0] != dirA || fa[1] != "a" || fa[2] != "None" || fa[3] != dirA || fa[4] != dirA {
		t.Fatalf("kernel a: %q", outA)
	}
	if len(fb) < 6 || fb[0] != dirB || fb[1] != "b" || fb[2] != "None" || fb[3] != dirB || fb[5] != dirB {
		t.Fatalf("kernel b: %q", outB)
	}
	var log []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if log, _ = os.ReadFile(logA); strings.Contains(string(log), "to-fd1") {
			return
		}
	}
	t.Fatalf("kernel log %q lacks fd-level output", log)
}

func TestRootServerDropsToUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to switch users")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	s := shared(t)
	work := t.TempDir()
	os.Chmod(filepath.Dir(work), 0o755)
	os.Chmod(work, 0o777)
	k := startKernel(t, s, func(o *jupyter.Options) {
		o.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		o.Dir, o.RuntimeDir = work, ""
	})
	requireForked(t, k, s)
	want := strconv.Itoa(uid) + " " + strconv.Itoa(gid) + " []"
	if _, _, out := run(t, k, "import os; print(os.getuid(), os.getgid(), os.getgroups())"); strings.TrimSpace(out) != want {
		t.Fatalf("identity = %q, want %q", out, want)
	}
}

func TestServerAsUserRefusesOtherUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to start a server as another user")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	rt := t.TempDir()
	os.Chmod(filepath.Dir(rt), 0o755) // the test's temp root, so nobody can reach rt
	os.Chmod(rt, 0o755)
	s := startServer(t, func(c *Config) {
		c.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		c.Preload, c.RuntimeDir = []string{}, rt
	})
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	ks := pythonSpec(t)
	req := jupyter.LaunchRequest{Spec: ks, Argv: []string{ks.Argv[0], "-m", "ipykernel_launcher", "-f", filepath.Join(dir, "k.json")},
		ConnectionFile: filepath.Join(dir, "k.json"), Dir: dir, Credential: &syscall.Credential{}}
	_, err = s.Launch(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "cannot switch to uid 0") {
		t.Fatalf("Launch as root from a nobody server: %v", err)
	}
}

func TestServerDeathFallsBackToCold(t *testing.T) {
	s := startServer(t, func(c *Config) { c.Preload = []string{} })
	if err := syscall.Kill(s.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
	ks := pythonSpec(t)
	_, err := s.Launch(context.Background(), jupyter.LaunchRequest{Spec: ks, Argv: []string{ks.Argv[0], "-m", "ipykernel_launcher"}})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Launch on a dead server: %v, want ErrUnavailable", err)
	}
	k := startKernel(t, s, nil)
	if ppid := parentOf(t, k.Pid()); ppid != os.Getpid() {
		t.Fatalf("fallback kernel parent = %d, want this process %d", ppid, os.Getpid())
	}
	if _, res, _ := run(t, k, "x = 1; x + 1"); res != "2" {
		t.Fatalf("cold fallback result %q", res)
	}
}

func TestLaunchRejectsOtherKernels(t *testing.T) {
	s := &Server{cfg: Config{Python: "/usr/bin/python3"}, done: make(chan struct{})}
	for _, argv := range [][]string{
		{"/usr/bin/python3", "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "c.json"},
		{"/opt/venv/bin/python", "-m", "ipykernel_launcher", "-f", "c.json"},
		{"deno", "jupyter", "--kernel"},
	} {
		if _, err := s.Launch(context.Background(), jupyter.LaunchRequest{Argv: argv}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Launch(%q) = %v, want ErrUnsupported", argv, err)
		}
	}
}

func TestStartFailsWhenPythonExits(t *testing.T) {
	_, err := Start(context.Background(), Config{Python: "/bin/false", RuntimeDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "exited before ready") {
		t.Fatalf("Start(/bin/false) = %v", err)
	}
}

// TestForkedKernelLooksCold runs the same probe in a cold and a forked kernel
// with the same cwd and env: import path, signal dispositions and mask, process
// group, stdin, environment names and arguments must match.
func TestForkedKernelLooksCold(t *testing.T) {
	s := shared(t)
	dir := t.TempDir()
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "PYTHONPATH=" + dir}
	opts := func(o *jupyter.Options) { o.Dir, o.Env = dir, env }
	cold, forked := startKernel(t, nil, opts), startKernel(t, s, opts)
	requireForked(t, forked, s)
	probe := `import sys, os, signal, json
print(json.dumps({"path": sys.path, "argv": [a for a in sys.argv[1:] if not a.endswith(".json")],
  "argv0": os.path.basename(sys.argv[0]),
  "sig": {int(s): str(signal.getsignal(s)) for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)},
  "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
  "pgrp": os.getpgrp() == os.getpid(), "stdin": os.readlink("/proc/self/fd/0"),
  "env": sorted(os.environ), "cwd": os.getcwd(), "main": type(sys.modules["__main__"]).__name__}, sort_keys=True))`
	ra, _, a := run(t, cold, probe)
	rb, _, b := run(t, forked, probe)
	if ra.Status != "ok" || rb.Status != "ok" {
		t.Fatalf("probe failed: %+v %+v", ra, rb)
	}
	if a != b || a == "" {
		t.Fatalf("cold and forked kernels differ:\ncold:   %s\nforked: %s", a, b)
	}
}

func TestStartReportsImportFailure(t *testing.T) {
	py := pythonSpec(t).Argv[0]
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "ipykernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A package shadowing ipykernel that cannot be imported.
	if err := os.WriteFile(filepath.Join(dir, "ipykernel", "__init__.py"), []byte("raise ImportError('planted')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), Config{Python: py, RuntimeDir: t.TempDir(), Preload: []string{},
		Env: []string{"PATH=/usr/bin:/bin", "PYTHONPATH=" + dir}})
	if err == nil || !strings.Contains(err.Error(), "planted") {
		t.Fatalf("Start with a broken ipykernel = %v", err)
	}
}
