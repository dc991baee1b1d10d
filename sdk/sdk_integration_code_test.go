package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// codeSandbox creates a sandbox from the code-interpreter template or skips.
func codeSandbox(t *testing.T) *sdk.Sandbox {
	t.Helper()
	requireServer(t)
	if env.ciTemplate == "" {
		t.Skip("no code-interpreter template: " + env.ciReason)
	}
	return newSandbox(t, &sdk.CreateOptions{Template: env.ciTemplate, Envs: map[string]string{"SBX_VAR": "from-sandbox"}})
}

// TestRunCodeBash runs cells in the bash context, which Cubby's interpreter
// service provides natively in every template (no Jupyter kernel needed).
func TestRunCodeBash(t *testing.T) {
	requireServer(t)
	if !env.cubby {
		t.Skip("the bash context without a code-interpreter template is Cubby-specific")
	}
	ctx := ctxT(t, time.Minute)
	sbx := newSandbox(t, nil)
	var streamed []string
	exec, err := sbx.RunCode(ctx, "X=41; echo $((X+1))", &sdk.RunCodeOptions{
		Language: "bash",
		OnStdout: func(m sdk.OutputMessage) { streamed = append(streamed, m.Line) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(exec.Logs.Stdout, "") != "42\n" || strings.Join(streamed, "") != "42\n" || exec.Error != nil {
		t.Fatalf("bash cell: %+v (streamed %q)", exec, streamed)
	}
	exec, err = sbx.RunCode(ctx, "echo $X $CELLVAR", &sdk.RunCodeOptions{Language: "bash", Envs: map[string]string{"CELLVAR": "cv"}})
	if err != nil || strings.Join(exec.Logs.Stdout, "") != "41 cv\n" {
		t.Fatalf("bash state/env: %+v %v", exec, err)
	}
	if _, err := sbx.RunCode(ctx, "x", &sdk.RunCodeOptions{Language: "bash", Context: &sdk.CodeContext{ID: "x"}}); err == nil {
		t.Fatal("Language together with Context accepted")
	}
}

// TestRunCodePython covers stateful cells, streaming callbacks, errors,
// results with charts and DataFrames, env vars, timeouts and cancellation.
func TestRunCodePython(t *testing.T) {
	ctx := ctxT(t, 5*time.Minute)
	sbx := codeSandbox(t)

	exec, err := sbx.RunCode(ctx, "x = 1", nil)
	if err != nil || exec.Error != nil {
		t.Fatalf("x = 1: %+v %v", exec, err)
	}
	var results []sdk.Result
	var stdout []sdk.OutputMessage
	exec, err = sbx.RunCode(ctx, "print('hi', flush=True)\nx += 1\nx", &sdk.RunCodeOptions{
		OnStdout: func(m sdk.OutputMessage) { stdout = append(stdout, m) },
		OnResult: func(r sdk.Result) { results = append(results, r) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if exec.Text() != "2" || len(results) != 1 || !results[0].IsMainResult || exec.ExecutionCount < 2 {
		t.Fatalf("stateful cell: %+v", exec)
	}
	if len(stdout) == 0 || stdout[0].Line != "hi\n" || stdout[0].Timestamp.IsZero() || stdout[0].Error {
		t.Fatalf("stdout callback: %+v", stdout)
	}

	var cbErr *sdk.ExecutionError
	exec, err = sbx.RunCode(ctx, "undefined_name", &sdk.RunCodeOptions{OnError: func(e sdk.ExecutionError) { cbErr = &e }})
	if err != nil || exec.Error == nil || exec.Error.Name != "NameError" || !strings.Contains(exec.Error.Traceback, "undefined_name") || cbErr == nil {
		t.Fatalf("NameError: %+v %v", exec, err)
	}

	exec, err = sbx.RunCode(ctx, "import os; os.environ.get('SBX_VAR'), os.environ.get('CELL_VAR')", &sdk.RunCodeOptions{Envs: map[string]string{"CELL_VAR": "cell"}})
	if err != nil || exec.Text() != "('from-sandbox', 'cell')" {
		t.Fatalf("env vars: %+v %v", exec, err)
	}

	code := `import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [4, 5, 6], label='up')
plt.title('Growth')
plt.xlabel('Time (s)')
plt.show()`
	exec, err = sbx.RunCode(ctx, code, nil)
	if err != nil || exec.Error != nil || len(exec.Results) != 1 {
		t.Fatalf("plot: %+v %v", exec, err)
	}
	r := exec.Results[0]
	png, err := r.PNGBytes()
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("plot PNG: %d bytes, %v", len(png), err)
	}
	if !slices.Contains(r.Formats(), "png") {
		t.Fatalf("formats %v", r.Formats())
	}
	line, ok := r.Chart.(*sdk.LineChart)
	if !ok || line.Title != "Growth" || line.XUnit != "s" || len(line.Elements) != 1 || len(line.Elements[0].Points) != 3 {
		t.Fatalf("line chart: %#v", r.Chart)
	}

	exec, err = sbx.RunCode(ctx, "import pandas as pd\npd.DataFrame({'a': [1, 2, 3]})", nil)
	if err != nil || len(exec.Results) != 1 || exec.Results[0].HTML == "" {
		t.Fatalf("DataFrame: %+v %v", exec, err)
	}
	if a, ok := exec.Results[0].Data["a"].([]any); !ok || len(a) != 3 {
		t.Fatalf("DataFrame data %v", exec.Results[0].Data)
	}

	// A timeout disconnects, the server interrupts, and the context still works.
	_, err = sbx.RunCode(ctx, "import time\ntime.sleep(120)", &sdk.RunCodeOptions{Timeout: 2 * time.Second})
	var te *sdk.TimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("sleep past Timeout: want *TimeoutError, got %T %v", err, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(time.Second, cancel)
	if _, err := sbx.RunCode(cctx, "import time\ntime.sleep(120)", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled RunCode: %T %v", err, err)
	}
	qctx, qcancel := context.WithTimeout(ctx, 30*time.Second)
	defer qcancel()
	if exec, err := sbx.RunCode(qctx, "x + 40", nil); err != nil || exec.Text() != "42" {
		t.Fatalf("after interrupts: %+v %v", exec, err)
	}
}

// TestCodeContexts covers create, list, restart, remove and not-found errors.
func TestCodeContexts(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	sbx := codeSandbox(t)
	cc, err := sbx.CreateCodeContext(ctx, &sdk.CodeContextOptions{Language: "python", Cwd: "/tmp"})
	if err != nil || cc.ID == "" || cc.Language != "python" || cc.Cwd != "/tmp" {
		t.Fatalf("CreateCodeContext = %+v, %v", cc, err)
	}
	exec, err := sbx.RunCode(ctx, "import os\ny = 7\nos.getcwd()", &sdk.RunCodeOptions{Context: cc})
	if err != nil || exec.Text() != "/tmp" {
		t.Fatalf("run in context: %+v %v", exec, err)
	}
	if exec, _ := sbx.RunCode(ctx, "'y' in globals()", nil); exec.Text() != "False" {
		t.Fatalf("contexts share state: %+v", exec)
	}
	list, err := sbx.ListCodeContexts(ctx)
	if err != nil || !slices.ContainsFunc(list, func(c sdk.CodeContext) bool { return c.ID == cc.ID }) {
		t.Fatalf("ListCodeContexts = %+v, %v", list, err)
	}
	if err := sbx.RestartCodeContext(ctx, cc.ID); err != nil {
		t.Fatal(err)
	}
	if exec, err := sbx.RunCode(ctx, "y", &sdk.RunCodeOptions{Context: cc}); err != nil || exec.Error == nil || exec.Error.Name != "NameError" {
		t.Fatalf("state after restart: %+v %v", exec, err)
	}
	if err := sbx.RemoveCodeContext(ctx, cc.ID); err != nil {
		t.Fatal(err)
	}
	_, err = sbx.RunCode(ctx, "1", &sdk.RunCodeOptions{Context: cc})
	assertNotFound(t, "RunCode in a removed context", err, sdk.ResourceContext)
	assertNotFound(t, "RemoveCodeContext twice", sbx.RemoveCodeContext(ctx, cc.ID), sdk.ResourceContext)
	assertNotFound(t, "RestartCodeContext(unknown)", sbx.RestartCodeContext(ctx, "nope"), sdk.ResourceContext)
}
