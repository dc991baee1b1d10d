package sdk_test

// Integration tests of the SDK against a real server. They run when
//   - CUBBY_BIN is set: the test starts `cubby serve` (as root) with its own data
//     directory, bridge and subnet and the shared templates directory
//     (CUBBY_TEMPLATES_DIR, default <repo>/.cache/templates); or
//   - E2B_API_KEY (and E2B_API_URL etc. as needed) is set: the tests use that
//     endpoint, e.g. E2B's cloud. SDK_TEST_TEMPLATE and SDK_TEST_CI_TEMPLATE
//     name the templates (default "base" and "code-interpreter-v1").
// Otherwise they skip. Goroutine leaks are checked for the whole package.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// testEnv is where the tests send their requests.
type testEnv struct {
	conn       sdk.ConnectionOptions
	template   string
	ciTemplate string // "" when no code-interpreter template is available
	ciReason   string // why ciTemplate is empty
	skip       string // non-empty: skip every integration test with this reason
	cubby      bool   // the server is our own `cubby serve`
}

var env testEnv

func TestMain(m *testing.M) {
	stop, err := setupEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sdk integration setup:", err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) { stop(code) }),
		// The harness's own watcher of the cubby serve child process.
		goleak.IgnoreAnyFunction("github.com/cubby-dev/cubby/internal/testenv/testserver.(*Server).wait"))
}

func setupEnv() (func(int), error) {
	noop := func(int) {}
	switch {
	case os.Getenv("CUBBY_BIN") != "":
		if env.skip = testserver.SkipReason(); env.skip != "" {
			return noop, nil
		}
		return startCubby()
	case os.Getenv("E2B_API_KEY") != "":
		env.template = envOr("SDK_TEST_TEMPLATE", "base")
		env.ciTemplate = envOr("SDK_TEST_CI_TEMPLATE", "code-interpreter-v1")
		return noop, nil
	}
	env.skip = "no server: set CUBBY_BIN to start `cubby serve`, or E2B_API_KEY/E2B_API_URL to use an endpoint"
	return noop, nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func randHex(n int) string { return testserver.RandHex(n) }

// startCubby starts `cubby serve` and returns its stopper, which kills every
// sandbox, stops the server (showing its log tail when the tests failed) and
// removes its bridge, nftables table and data.
func startCubby() (func(int), error) {
	ts, err := testserver.Launch(testserver.Options{BridgePrefix: "cbsdk", Args: []string{"--domain", "cubby.test"}})
	if err != nil {
		return nil, err
	}
	env.cubby, env.template = true, "base"
	env.conn = sdk.ConnectionOptions{APIKey: ts.Key, APIURL: ts.URL(""), SandboxURL: ts.URL("")}
	findCodeInterpreterTemplate(ts.Bin, ts.TemplatesDir)
	return func(code int) {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "--- cubby serve log (tail) ---\n%s\n", ts.Log())
		}
		ts.Stop()
	}, nil
}

// findCodeInterpreterTemplate checks `cubby template list` for "code-interpreter".
func findCodeInterpreterTemplate(bin, tdir string) {
	out, err := exec.Command(bin, "template", "list", "--templates-dir", tdir).CombinedOutput()
	if err != nil {
		env.ciReason = fmt.Sprintf("`cubby template list` failed: %v", err)
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "code-interpreter" {
			env.ciTemplate = "code-interpreter"
			return
		}
	}
	env.ciReason = "the code-interpreter template is not built in " + tdir + " (build it with `cubby template build`)"
}

// requireServer skips the test when no server is configured.
func requireServer(t *testing.T) {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newSandbox creates a sandbox that is killed when the test ends.
func newSandbox(t *testing.T, opts *sdk.CreateOptions) *sdk.Sandbox {
	t.Helper()
	requireServer(t)
	if opts == nil {
		opts = &sdk.CreateOptions{}
	}
	opts.ConnectionOptions = env.conn
	if opts.Template == "" {
		opts.Template = env.template
	}
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Minute
	}
	sbx, err := sdk.Create(ctxT(t, 2*time.Minute), opts)
	if err != nil {
		t.Fatalf("create sandbox: %v", err)
	}
	t.Cleanup(func() {
		err := sbx.Kill(context.Background())
		if err != nil && !errors.Is(err, sdk.ErrNotFound) {
			t.Errorf("kill %s: %v", sbx.ID(), err)
		}
	})
	return sbx
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLifecycle covers Create, GetInfo (instance and package), IsRunning,
// Connect, GetHost, SetTimeout, Kill and the not-found errors after a kill.
func TestLifecycle(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	md := map[string]string{"suite": "sdk-" + randHex(4), "k y": "v&1"}
	sbx := newSandbox(t, &sdk.CreateOptions{Metadata: md, Envs: map[string]string{"GREETING": "hello"}})

	info, err := sbx.GetInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.SandboxID != sbx.ID() || info.State != sdk.StateRunning || info.Metadata["k y"] != "v&1" ||
		info.EnvdVersion == "" || !info.EndAt.After(info.StartedAt) || info.CPUCount < 1 || info.MemoryMB < 1 {
		t.Fatalf("unexpected info %+v", info)
	}
	if d := info.EndAt.Sub(info.StartedAt); d < 4*time.Minute || d > 6*time.Minute {
		t.Fatalf("timeout not applied: endAt-startedAt = %s", d)
	}
	if pinfo, err := sdk.GetInfo(ctx, sbx.ID(), &env.conn); err != nil || pinfo.SandboxID != sbx.ID() {
		t.Fatalf("package GetInfo: %+v %v", pinfo, err)
	}
	if ok, err := sbx.IsRunning(ctx); err != nil || !ok {
		t.Fatalf("IsRunning = %v, %v", ok, err)
	}
	if res, err := sbx.Commands.Run(ctx, "echo $GREETING", nil); err != nil || res.Stdout != "hello\n" {
		t.Fatalf("sandbox envs: %+v %v", res, err)
	}
	if got, want := sbx.GetHost(8080), "8080-"+sbx.ID()+"."+sbx.Domain(); got != want {
		t.Fatalf("GetHost = %q, want %q", got, want)
	}

	again, err := sdk.Connect(ctx, sbx.ID(), &sdk.ConnectOptions{ConnectionOptions: env.conn, Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if again.ID() != sbx.ID() || again.AccessToken() != sbx.AccessToken() {
		t.Fatalf("connect returned %s (token match %v)", again.ID(), again.AccessToken() == sbx.AccessToken())
	}
	if out, err := again.Files.Exists(ctx, "/home/user", nil); err != nil || !out {
		t.Fatalf("connected sandbox cannot stat home: %v %v", out, err)
	}
	info2, err := again.GetInfo(ctx)
	if err != nil || info2.EndAt.Sub(time.Now()) < 9*time.Minute {
		t.Fatalf("connect did not extend the deadline: %+v %v", info2, err)
	}

	if err := sbx.SetTimeout(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the sandbox to stop after SetTimeout(1s)", func() bool {
		ok, err := sbx.IsRunning(ctx)
		_, ierr := sdk.GetInfo(ctx, sbx.ID(), &env.conn)
		return err == nil && !ok && errors.Is(ierr, sdk.ErrNotFound)
	})
	assertNotFound(t, "Kill after timeout", sbx.Kill(ctx), sdk.ResourceSandbox)
	assertNotFound(t, "package Kill", sdk.Kill(ctx, sbx.ID(), &env.conn), sdk.ResourceSandbox)
	_, err = sdk.Connect(ctx, sbx.ID(), &sdk.ConnectOptions{ConnectionOptions: env.conn})
	assertNotFound(t, "Connect after kill", err, sdk.ResourceSandbox)
	_, err = sbx.GetInfo(ctx)
	assertNotFound(t, "GetInfo after kill", err, sdk.ResourceSandbox)
	assertNotFound(t, "SetTimeout after kill", sbx.SetTimeout(ctx, time.Minute), sdk.ResourceSandbox)
}

func assertNotFound(t *testing.T, what string, err error, resource string) {
	t.Helper()
	var nf *sdk.NotFoundError
	if !errors.Is(err, sdk.ErrNotFound) || !errors.As(err, &nf) || nf.Resource != resource {
		t.Fatalf("%s: want a %s NotFoundError, got %T %v", what, resource, err, err)
	}
}

// TestKillRunning kills a live sandbox and checks IsRunning and the health probe.
func TestKillRunning(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	sbx := newSandbox(t, nil)
	if err := sbx.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := sbx.IsRunning(ctx); err != nil || ok {
		t.Fatalf("IsRunning after kill = %v, %v", ok, err)
	}
	_, err := sbx.Files.Read(ctx, "/etc/hostname", nil)
	if !errors.Is(err, sdk.ErrSandboxKilled) {
		t.Fatalf("read after kill: want ErrSandboxKilled, got %T %v", err, err)
	}
	var te *sdk.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("read after kill: want *TimeoutError, got %T", err)
	}
}

// TestMetrics waits for at least one metrics sample and checks the range filter.
func TestMetrics(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	sbx := newSandbox(t, nil)
	var ms []sdk.SandboxMetrics
	eventually(t, 30*time.Second, "a metrics sample", func() bool {
		var err error
		ms, err = sbx.GetMetrics(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(ms) > 0
	})
	m := ms[len(ms)-1]
	if m.CPUCount < 1 || m.MemTotal <= 0 || m.DiskTotal <= 0 || m.Timestamp.IsZero() {
		t.Fatalf("implausible sample %+v", m)
	}
	old, err := sbx.GetMetrics(ctx, &sdk.MetricsOptions{Start: time.Now().Add(-48 * time.Hour), End: time.Now().Add(-47 * time.Hour)})
	if err != nil || len(old) != 0 {
		t.Fatalf("metrics before the sandbox existed: %v %v", old, err)
	}
}

// TestPauseResume pauses and resumes a sandbox: with memory, processes and
// files survive; filesystem-only (KeepMemory false), files survive.
func TestPauseResume(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	sbx := newSandbox(t, nil)
	if _, err := sbx.Files.Write(ctx, "keep.txt", []byte("still here"), nil); err != nil {
		t.Fatal(err)
	}
	sleeper, err := sbx.Commands.Start(ctx, "sleep 600", &sdk.CommandOptions{Timeout: sdk.NoTimeout})
	if err != nil {
		t.Fatal(err)
	}
	sleeper.Disconnect()
	paused, err := sbx.Pause(ctx, nil)
	var ae *sdk.APIError
	if errors.As(err, &ae) && ae.StatusCode == http.StatusNotImplemented {
		t.Skipf("the server cannot pause: %v", err)
	}
	if err != nil || !paused {
		t.Fatalf("Pause = %v, %v", paused, err)
	}
	if ok, err := sbx.IsRunning(ctx); err != nil || ok {
		t.Fatalf("IsRunning while paused = %v, %v", ok, err)
	}
	if info, err := sbx.GetInfo(ctx); err != nil || info.State != sdk.StatePaused {
		t.Fatalf("state while paused: %+v %v", info, err)
	}
	if again, err := sbx.Pause(ctx, nil); err != nil || again {
		t.Fatalf("second Pause = %v, %v (want false, nil)", again, err)
	}
	if err := sbx.Resume(ctx, &sdk.ResumeOptions{Timeout: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if s, err := sbx.Files.ReadString(ctx, "keep.txt", nil); err != nil || s != "still here" {
		t.Fatalf("after resume: %q %v", s, err)
	}
	procs, err := sbx.Commands.List(ctx)
	if err != nil || !slices.ContainsFunc(procs, func(p sdk.ProcessInfo) bool { return p.PID == sleeper.PID() }) {
		t.Fatalf("process %d did not survive a memory pause: %+v %v", sleeper.PID(), procs, err)
	}

	paused, err = sbx.Pause(ctx, &sdk.PauseOptions{KeepMemory: new(false)})
	var ia *sdk.InvalidArgumentError
	if errors.As(err, &ia) && !env.cubby {
		t.Skipf("the endpoint rejects filesystem-only pauses: %v", err)
	}
	if err != nil || !paused {
		t.Fatalf("filesystem-only Pause = %v, %v", paused, err)
	}
	if info, err := sbx.GetInfo(ctx); err != nil || (info.PauseMode != "" && info.PauseMode != "filesystem") {
		t.Fatalf("pause mode: %+v %v", info, err)
	}
	if _, err := sdk.Connect(ctx, sbx.ID(), &sdk.ConnectOptions{ConnectionOptions: env.conn}); err != nil {
		t.Fatal(err)
	}
	if s, err := sbx.Files.ReadString(ctx, "keep.txt", nil); err != nil || s != "still here" {
		t.Fatalf("after a filesystem-only pause: %q %v", s, err)
	}
}

// TestList covers filters, ordering, the paginator and the iterator.
func TestList(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	tag := "list-" + randHex(4)
	md := map[string]string{"list": tag, "odd key=&": "odd value %20"}
	a := newSandbox(t, &sdk.CreateOptions{Metadata: md})
	b := newSandbox(t, &sdk.CreateOptions{Metadata: md})
	opts := &sdk.ListOptions{ConnectionOptions: env.conn, Metadata: md, Limit: 1}

	p := sdk.NewSandboxPaginator(opts)
	var ids []string
	for p.HasNext() {
		page, err := p.NextItems(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 1 {
			t.Fatalf("page of %d with Limit 1", len(page))
		}
		for _, info := range page {
			ids = append(ids, info.SandboxID)
			if info.Metadata["odd key=&"] != "odd value %20" {
				t.Fatalf("metadata not round-tripped: %v", info.Metadata)
			}
		}
	}
	if len(ids) != 2 || ids[0] != b.ID() || ids[1] != a.ID() {
		t.Fatalf("paged listing = %v, want newest first [%s %s]", ids, b.ID(), a.ID())
	}
	if _, err := p.NextItems(ctx); err == nil {
		t.Fatal("NextItems after the last page did not fail")
	}

	asc := &sdk.ListOptions{ConnectionOptions: env.conn, Metadata: map[string]string{"list": tag}, Order: "asc"}
	var got []string
	for info, err := range sdk.List(ctx, asc) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, info.SandboxID)
	}
	if len(got) != 2 || got[0] != a.ID() {
		t.Fatalf("ascending listing = %v, want [%s %s]", got, a.ID(), b.ID())
	}
	for info, err := range sdk.List(ctx, &sdk.ListOptions{ConnectionOptions: env.conn, Metadata: md, State: []sdk.SandboxState{sdk.StatePaused}}) {
		t.Fatalf("paused filter returned %v %v", info.SandboxID, err)
	}
	for info, err := range sdk.List(ctx, &sdk.ListOptions{ConnectionOptions: env.conn, Metadata: md, StartedAfter: time.Now().Add(time.Hour)}) {
		t.Fatalf("startedAfter filter returned %v %v", info.SandboxID, err)
	}
	// Stopping the iteration early must not fetch further pages or leak.
	for range sdk.List(ctx, opts) {
		break
	}
}

// TestAuthAndConnectionErrors: wrong, missing key; unreachable server.
func TestAuthAndConnectionErrors(t *testing.T) {
	requireServer(t)
	ctx := ctxT(t, time.Minute)
	bad := env.conn
	bad.APIKey = "e2b_" + strings.Repeat("0", 40)
	_, err := sdk.Create(ctx, &sdk.CreateOptions{ConnectionOptions: bad, Template: env.template})
	var ae *sdk.AuthenticationError
	if !errors.As(err, &ae) {
		t.Fatalf("create with a wrong key: want *AuthenticationError, got %T %v", err, err)
	}
	for _, err := range sdk.List(ctx, &sdk.ListOptions{ConnectionOptions: bad}) {
		if !errors.As(err, &ae) {
			t.Fatalf("list with a wrong key: want *AuthenticationError, got %T %v", err, err)
		}
	}
	if env.cubby {
		t.Setenv("E2B_API_KEY", "")
		none := env.conn
		none.APIKey = ""
		if err := sdk.Kill(ctx, "whatever", &none); !errors.As(err, &ae) || !strings.Contains(err.Error(), "E2B_API_KEY") {
			t.Fatalf("no key: want *AuthenticationError naming E2B_API_KEY, got %v", err)
		}
	}

	port, _ := testserver.FreePort() // nothing listens there any more
	down := env.conn
	down.APIURL = fmt.Sprintf("http://127.0.0.1:%d", port)
	_, err = sdk.Create(ctx, &sdk.CreateOptions{ConnectionOptions: down})
	var ce *sdk.ConnectionError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "E2B_API_URL") {
		t.Fatalf("unreachable server: want *ConnectionError, got %T %v", err, err)
	}
	assertNotFound(t, "GetInfo of an unknown sandbox", func() error { _, err := sdk.GetInfo(ctx, "nosuchsandbox0000000", &env.conn); return err }(), sdk.ResourceSandbox)
}

// TestCancelledContext: a cancelled context fails fast with context.Canceled
// everywhere, and a short deadline gives a *TimeoutError.
func TestCancelledContext(t *testing.T) {
	sbx := newSandbox(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	checks := map[string]error{}
	_, checks["Create"] = sdk.Create(ctx, &sdk.CreateOptions{ConnectionOptions: env.conn, Template: env.template})
	_, checks["GetInfo"] = sbx.GetInfo(ctx)
	_, checks["Read"] = sbx.Files.Read(ctx, "/etc/hostname", nil)
	_, checks["Stat"] = sbx.Files.GetInfo(ctx, "/etc/hostname", nil)
	_, checks["Run"] = sbx.Commands.Run(ctx, "true", nil)
	_, checks["WatchDir"] = sbx.Files.WatchDir(ctx, "/tmp", nil)
	_, checks["RunCode"] = sbx.RunCode(ctx, "true", &sdk.RunCodeOptions{Language: "bash"})
	for name, err := range checks {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: want context.Canceled, got %T %v", name, err, err)
		}
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer dcancel()
	_, err := sbx.Commands.Run(dctx, "sleep 20", nil)
	var te *sdk.TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run past the context deadline: want *TimeoutError, got %T %v", err, err)
	}
}

// TestSandboxKilledMidCall kills the sandbox while a command streams.
func TestSandboxKilledMidCall(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	sbx := newSandbox(t, nil)
	started := make(chan struct{}, 1)
	h, err := sbx.Commands.Start(ctx, "echo ready; sleep 50", &sdk.CommandOptions{
		Timeout:  time.Minute,
		OnStdout: func(string) { started <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := sdk.Kill(ctx, sbx.ID(), &env.conn); err != nil {
		t.Fatal(err)
	}
	_, err = h.Wait(ctx)
	if !errors.Is(err, sdk.ErrSandboxKilled) {
		t.Fatalf("command of a killed sandbox: want ErrSandboxKilled, got %T %v", err, err)
	}
	if !strings.Contains(err.Error(), "sandbox "+sbx.ID()+" was killed") {
		t.Fatalf("unhelpful message: %v", err)
	}
}
