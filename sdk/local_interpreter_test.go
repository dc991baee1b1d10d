package sdk_test

import (
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/interpreter"
	"github.com/cubby-dev/cubby/internal/agent/kernels/python"
	"github.com/cubby-dev/cubby/sdk"
)

// TestDebugModeLocalInterpreter drives Cubby's real code-interpreter service
// (internal/agent/interpreter with this host's ipykernel) on a loopback listener in
// debug mode (docs/wire/e2b-api.md §1.7: no control plane, the sandbox URL points at the
// service). It covers RunCode's NDJSON decoding, callbacks, charts,
// DataFrames, contexts and interrupt-on-timeout without a sandbox.
func TestDebugModeLocalInterpreter(t *testing.T) {
	if out, err := exec.Command("/usr/bin/python3", "-c", "import ipykernel, matplotlib, pandas").CombinedOutput(); err != nil {
		t.Skipf("needs python3-ipykernel, matplotlib and pandas on the host: %v %s", err, out)
	}
	ext := t.TempDir()
	if err := python.Install(ext); err != nil {
		t.Fatal(err)
	}
	svc, err := interpreter.New(interpreter.Config{
		Log:              slog.New(slog.NewTextHandler(io.Discard, nil)),
		PythonPath:       []string{ext},
		DefaultLanguages: []string{},
		Workdir:          t.TempDir(),
		RuntimeDir:       t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(func() { srv.Close(); svc.Close() })

	ctx := ctxT(t, 3*time.Minute)
	sbx, err := sdk.Connect(ctx, "local", &sdk.ConnectOptions{ConnectionOptions: sdk.ConnectionOptions{Debug: true, SandboxURL: srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer sbx.Close()
	if sbx.GetHost(3000) != "localhost:3000" {
		t.Fatalf("debug GetHost = %q", sbx.GetHost(3000))
	}

	var lines []string
	exec, err := sbx.RunCode(ctx, "x = 41\nprint('side', flush=True)\nx + 1", &sdk.RunCodeOptions{
		OnStdout: func(m sdk.OutputMessage) { lines = append(lines, m.Line) },
	})
	if err != nil || exec.Text() != "42" || exec.ExecutionCount != 1 || !slices.Equal(lines, []string{"side\n"}) {
		t.Fatalf("first cell: %+v %v (stdout %q)", exec, err, lines)
	}
	exec, err = sbx.RunCode(ctx, "import sys\nprint('warn', file=sys.stderr)\n1/0", nil)
	if err != nil || exec.Error == nil || exec.Error.Name != "ZeroDivisionError" || strings.Join(exec.Logs.Stderr, "") != "warn\n" {
		t.Fatalf("error cell: %+v %v", exec, err)
	}

	code := "import matplotlib.pyplot as plt\n" +
		"plt.bar(['a', 'b'], [3, 5])\nplt.title('Bars')\nplt.show()\n" +
		"import pandas as pd\npd.DataFrame({'n': [1, 2, 3]})"
	exec, err = sbx.RunCode(ctx, code, nil)
	if err != nil || exec.Error != nil || len(exec.Results) != 2 {
		t.Fatalf("chart cell: %v %v (results %d)", exec.Error, err, len(exec.Results))
	}
	fig, df := exec.Results[0], exec.Results[1]
	if png, err := fig.PNGBytes(); err != nil || len(png) < 100 {
		t.Fatalf("figure PNG: %d bytes, %v", len(png), err)
	}
	bar, ok := fig.Chart.(*sdk.BarChart)
	if !ok || bar.Title != "Bars" || len(bar.Elements) != 2 || bar.Elements[1].Value != 5 {
		t.Fatalf("bar chart: %#v (formats %v)", fig.Chart, fig.Formats())
	}
	if !df.IsMainResult || df.HTML == "" || len(df.Data["n"].([]any)) != 3 {
		t.Fatalf("DataFrame result: %+v", df)
	}

	cc, err := sbx.CreateCodeContext(ctx, &sdk.CodeContextOptions{Language: "python"})
	if err != nil {
		t.Fatal(err)
	}
	if exec, _ := sbx.RunCode(ctx, "'x' in globals()", &sdk.RunCodeOptions{Context: cc}); exec.Text() != "False" {
		t.Fatalf("new context sees the default one's state: %+v", exec)
	}
	if list, err := sbx.ListCodeContexts(ctx); err != nil || !slices.ContainsFunc(list, func(c sdk.CodeContext) bool { return c.ID == cc.ID }) {
		t.Fatalf("ListCodeContexts = %+v, %v", list, err)
	}
	_, err = sbx.RunCode(ctx, "import time\ntime.sleep(60)", &sdk.RunCodeOptions{Context: cc, Timeout: time.Second})
	var te *sdk.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("cell past its Timeout: want *TimeoutError, got %T %v", err, err)
	}
	if exec, err := sbx.RunCode(ctx, "2 + 2", &sdk.RunCodeOptions{Context: cc}); err != nil || exec.Text() != "4" {
		t.Fatalf("context after the interrupt: %+v %v", exec, err)
	}
	if err := sbx.RestartCodeContext(ctx, cc.ID); err != nil {
		t.Fatal(err)
	}
	if err := sbx.RemoveCodeContext(ctx, cc.ID); err != nil {
		t.Fatal(err)
	}
	_, err = sbx.RunCode(ctx, "1", &sdk.RunCodeOptions{Context: cc})
	assertNotFound(t, "RunCode in a removed context", err, sdk.ResourceContext)
	var ia *sdk.InvalidArgumentError
	if _, err := sbx.RunCode(ctx, "1", &sdk.RunCodeOptions{Language: "no-such-language"}); !errors.As(err, &ia) {
		t.Fatalf("unknown language: want *InvalidArgumentError, got %T %v", err, err)
	}
}
