package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pythonArgs are the flags the interpreter passes too: plain tracebacks and no
// shared history database.
var pythonArgs = []string{"--InteractiveShell.colors=NoColor", "--HistoryManager.enabled=False"}

// pythonSpec returns the host's ipykernel kernelspec or skips the test
// (host package python3-ipykernel).
func pythonSpec(t testing.TB) *KernelSpec {
	t.Helper()
	ks, err := LookupKernelSpec(KernelSpecDirs("", ""), "python3")
	if err != nil {
		t.Skipf("ipykernel not installed (apt-get install python3-ipykernel): %v", err)
	}
	return ks
}

// startPython starts a fresh ipykernel that is closed when the test ends.
func startPython(t testing.TB, mod func(*Options)) *Kernel {
	t.Helper()
	o := Options{ExtraArgs: pythonArgs, RuntimeDir: t.TempDir(), InterruptGrace: 10 * time.Second}
	if mod != nil {
		mod(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	k, err := Start(ctx, pythonSpec(t), o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// collector records every message an execution delivers.
type collector struct{ msgs []*Message }

func (c *collector) on(m *Message) { c.msgs = append(c.msgs, m) }

func (c *collector) types() []string {
	var out []string
	for _, m := range c.msgs {
		out = append(out, m.Channel+":"+m.Type())
	}
	return out
}

func (c *collector) stream(name string) string {
	var b strings.Builder
	for _, m := range c.msgs {
		if m.Type() != "stream" {
			continue
		}
		var s struct{ Name, Text string }
		m.Decode(&s)
		if s.Name == name {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

func (c *collector) first(typ string) *Message {
	for _, m := range c.msgs {
		if m.Type() == typ {
			return m
		}
	}
	return nil
}

func run(t *testing.T, k *Kernel, code string) (Reply, *collector) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := &collector{}
	r, err := k.Execute(ctx, ExecuteRequest{Code: code, StoreHistory: true}, c.on)
	if err != nil {
		t.Fatalf("Execute(%q): %v", code, err)
	}
	return r, c
}

func shared(t *testing.T) *Kernel {
	t.Helper()
	sharedOnce.Do(func() {
		o := Options{ExtraArgs: pythonArgs, RuntimeDir: os.TempDir(), InterruptGrace: 10 * time.Second}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		sharedKernel, sharedErr = Start(ctx, pythonSpec(t), o)
	})
	if sharedErr != nil {
		t.Fatalf("Start: %v", sharedErr)
	}
	return sharedKernel
}

var (
	sharedOnce   sync.Once
	sharedKernel *Kernel
	sharedErr    error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedKernel != nil {
		sharedKernel.Shutdown(context.Background())
	}
	os.Exit(code)
}

func TestExecuteCountsAndFlow(t *testing.T) {
	t.Parallel()
	k := startPython(t, nil)
	if info := k.Info(); info.LanguageInfo.Name != "python" || info.ProtocolVersion == "" {
		t.Fatalf("kernel info = %+v", info)
	}
	r1, _ := run(t, k, "x = 1")
	r2, c := run(t, k, "x += 1; x")
	if r1.Status != "ok" || r1.ExecutionCount != 1 || r2.Status != "ok" || r2.ExecutionCount != 2 {
		t.Fatalf("replies %+v %+v", r1, r2)
	}
	// Jupyter orders messages within a channel, not across channels: the
	// shell reply may overtake the IOPub messages of the same request.
	want := []string{"iopub:status", "iopub:execute_input", "iopub:execute_result", "iopub:status"}
	got := c.types()
	var iopub []string
	for _, ty := range got {
		if strings.HasPrefix(ty, "iopub:") {
			iopub = append(iopub, ty)
		}
	}
	if !slices.Equal(iopub, want) || !contains(got, "shell:execute_reply") {
		t.Fatalf("message flow = %v, want IOPub %v and a shell:execute_reply", got, want)
	}
	var res struct {
		Count int               `json:"execution_count"`
		Data  map[string]string `json:"data"`
	}
	c.first("execute_result").Decode(&res)
	if res.Data["text/plain"] != "2" || res.Count != 2 {
		t.Fatalf("execute_result = %+v", res)
	}
	// A silent execution does not bump the count.
	ctx := context.Background()
	if r, err := k.Execute(ctx, ExecuteRequest{Code: "y = 3", Silent: true}, nil); err != nil || r.Status != "ok" {
		t.Fatalf("silent: %+v %v", r, err)
	}
	if r3, _ := run(t, k, "y"); r3.ExecutionCount != 3 {
		t.Fatalf("count after silent = %d, want 3", r3.ExecutionCount)
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

func TestStreamOrder(t *testing.T) {
	k := shared(t)
	code := "import sys, time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.01)\nprint('err', file=sys.stderr)"
	_, c := run(t, k, code)
	if got := c.stream("stdout"); got != "0\n1\n2\n3\n4\n" {
		t.Fatalf("stdout = %q", got)
	}
	if got := c.stream("stderr"); got != "err\n" {
		t.Fatalf("stderr = %q", got)
	}
	for _, m := range c.msgs {
		if m.Type() == "stream" && m.Header.Date == "" {
			t.Fatal("stream message without header date")
		}
	}
}

func TestErrorTraceback(t *testing.T) {
	k := shared(t)
	r, c := run(t, k, "def f():\n    return 1/0\nf()")
	if r.Status != "error" || r.Ename != "ZeroDivisionError" {
		t.Fatalf("reply = %+v", r)
	}
	m := c.first("error")
	if m == nil {
		t.Fatalf("no error message in %v", c.types())
	}
	var e struct {
		Ename     string   `json:"ename"`
		Traceback []string `json:"traceback"`
	}
	m.Decode(&e)
	tb := strings.Join(e.Traceback, "\n")
	if e.Ename != "ZeroDivisionError" || !strings.Contains(tb, "1/0") || strings.Contains(tb, "\x1b[") {
		t.Fatalf("error = %+v", e)
	}
	// The kernel keeps working after an error (stop_on_error=false, no abort).
	if r, _ := run(t, k, "1+1"); r.Status != "ok" {
		t.Fatalf("after error: %+v", r)
	}
}

func TestDisplayData(t *testing.T) {
	k := shared(t)
	_, c := run(t, k, "from IPython.display import display\ndisplay({'text/plain': 'hi', 'text/html': '<b>hi</b>'}, raw=True)")
	m := c.first("display_data")
	if m == nil {
		t.Fatalf("no display_data in %v", c.types())
	}
	var d struct {
		Data map[string]string `json:"data"`
	}
	m.Decode(&d)
	if d.Data["text/html"] != "<b>hi</b>" || d.Data["text/plain"] != "hi" {
		t.Fatalf("display_data = %+v", d)
	}
}

func TestInputFailsFast(t *testing.T) {
	k := shared(t)
	r, _ := run(t, k, "input('name? ')")
	if r.Status != "error" || r.Ename != "StdinNotImplementedError" {
		t.Fatalf("reply = %+v", r)
	}
}

func TestLargeOutput(t *testing.T) {
	k := shared(t)
	_, c := run(t, k, "import sys; sys.stdout.write('x' * 10_000_000); None")
	if got := c.stream("stdout"); len(got) != 10_000_000 || strings.Trim(got, "x") != "" {
		t.Fatalf("stdout length = %d", len(got))
	}
}

func TestSlowConsumerLosesNothing(t *testing.T) {
	k := startPython(t, nil)
	const n = 20000
	var displays int
	stalled := false
	on := func(m *Message) {
		if !stalled {
			stalled = true
			// Stall the consumer until the readers have queued the final idle:
			// proves they never wait for us.
			waitQueuedIdle(t, k)
		}
		if m.Type() == "display_data" {
			displays++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	code := "from IPython.display import display\nfor i in range(" + strconv.Itoa(n) + "):\n    display(i)"
	r, err := k.Execute(ctx, ExecuteRequest{Code: code}, on)
	if err != nil || r.Status != "ok" || r.Incomplete || r.Dropped != 0 {
		t.Fatalf("reply %+v err %v", r, err)
	}
	if displays != n {
		t.Fatalf("got %d display_data, want %d", displays, n)
	}
}

// waitQueuedIdle polls the pending queues until one holds a status idle.
func waitQueuedIdle(t *testing.T, k *Kernel) {
	deadline := time.Now().Add(100 * time.Second)
	for time.Now().Before(deadline) {
		k.mu.Lock()
		r := k.cur.router
		k.mu.Unlock()
		r.mu.Lock()
		found := false
		for _, q := range r.pending {
			q.mu.Lock()
			for _, m := range q.msgs {
				if m.Type() == "status" && strings.Contains(string(m.Content), "idle") {
					found = true
				}
			}
			q.mu.Unlock()
		}
		r.mu.Unlock()
		if found {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Error("idle never queued while the consumer stalled")
}

func TestInterruptKeepsState(t *testing.T) {
	k := shared(t)
	run(t, k, "kept = 42")
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{}
	on := func(m *Message) {
		c.on(m)
		if m.Type() == "stream" {
			cancel()
		}
	}
	r, err := k.Execute(ctx, ExecuteRequest{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(100)"}, on)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if r.Status != "error" || r.Ename != "KeyboardInterrupt" {
		t.Fatalf("reply = %+v", r)
	}
	if r, c := run(t, k, "kept"); r.Status != "ok" || !resultContains(c, "42") {
		t.Fatalf("after interrupt: %+v", r)
	}
}

func TestKernelDeathAndRecovery(t *testing.T) {
	k := startPython(t, nil)
	run(t, k, "state = 1")
	oldPid := k.Pid()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := k.Execute(ctx, ExecuteRequest{Code: "import os, time\ntime.sleep(0.2)\nos._exit(1)"}, nil)
	if !errors.Is(err, ErrKernelDied) {
		t.Fatalf("err = %v, want ErrKernelDied", err)
	}
	r, c := run(t, k, "'state' in globals()")
	if r.Status != "ok" || !resultContains(c, "False") {
		t.Fatalf("after death: %+v %v", r, c.types())
	}
	if k.Pid() == oldPid {
		t.Fatal("pid unchanged after recovery")
	}
}

func TestInterruptEscalatesToKill(t *testing.T) {
	k := startPython(t, func(o *Options) { o.InterruptGrace = 500 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	on := func(m *Message) {
		if m.Type() == "stream" {
			cancel()
		}
	}
	code := "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(100)"
	_, err := k.Execute(ctx, ExecuteRequest{Code: code}, on)
	if !errors.Is(err, ErrInterruptTimeout) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if r, _ := run(t, k, "1"); r.Status != "ok" || r.ExecutionCount != 1 {
		t.Fatalf("after kill: %+v", r)
	}
}

func TestRestartAndShutdown(t *testing.T) {
	k := startPython(t, nil)
	run(t, k, "v = 1")
	pid := k.Pid()
	if err := k.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r, _ := run(t, k, "v"); r.Status != "error" || r.Ename != "NameError" {
		t.Fatalf("after restart: %+v", r)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("old kernel pid %d still alive", pid)
	}
	pid = k.Pid()
	k.mu.Lock()
	dir := k.cur.dir
	k.mu.Unlock()
	if err := k.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("kernel pid %d alive after Shutdown", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("runtime dir %s not removed: %v", dir, err)
	}
	if _, err := k.Execute(context.Background(), ExecuteRequest{Code: "1"}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Execute after Shutdown: %v", err)
	}
}

func TestRunsAsUserWithEnvAndLog(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to switch users")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	work := t.TempDir()
	os.Chmod(filepath.Dir(work), 0o755)
	os.Chmod(work, 0o777)
	logPath := filepath.Join(t.TempDir(), "kernel.log")
	k := startPython(t, func(o *Options) {
		o.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		o.Dir = work
		o.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work, "CUBBY_T=v1"}
		o.LogPath = logPath
		o.LogAttrs = []slog.Attr{slog.String("context", "c1")}
		o.RuntimeDir = ""
	})
	_, c := run(t, k, "import os; print(os.getuid(), os.getcwd(), os.environ['CUBBY_T']); os.system('echo to-fd1')")
	want := strconv.Itoa(uid) + " " + work + " v1\n"
	if got := c.stream("stdout"); !strings.HasPrefix(got, want) {
		t.Fatalf("stdout = %q, want prefix %q", got, want)
	}
	// The log is copied asynchronously; poll for the fd-level output.
	var b []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, _ = os.ReadFile(logPath); strings.Contains(string(b), "to-fd1") {
			break
		}
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec struct {
			Time               time.Time
			Level, Msg, Source string
			Kernel, Context    string
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("kernel log line %q is not a JSON record: %v", line, err)
		}
		if rec.Time.IsZero() || rec.Level != "INFO" || rec.Source != "kernel" || rec.Kernel != "python3" || rec.Context != "c1" {
			t.Fatalf("kernel log record %q lacks time, level or attributes", line)
		}
		found = found || rec.Msg == "to-fd1"
	}
	if !found {
		t.Fatalf("kernel log %q lacks fd-level output", b)
	}
}
