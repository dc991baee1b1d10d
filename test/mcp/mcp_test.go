package mcptest

import (
	"bytes"
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// allTools are the tools issue 13 asks for.
var allTools = []string{"run_code", "run_command", "command_output", "command_kill", "file_read", "file_write",
	"file_list", "sandbox_create", "sandbox_list", "sandbox_info", "sandbox_kill", "sandbox_set_timeout",
	"sandbox_pause", "sandbox_resume", "get_url", "template_list"}

type cell struct {
	Sandbox string `json:"sandbox"`
	Stdout  string `json:"stdout"`
	Results []struct {
		Text         string   `json:"text"`
		Formats      []string `json:"formats"`
		IsMainResult bool     `json:"is_main_result"`
		Image        string   `json:"image"`
	} `json:"results"`
	Error *struct {
		Name      string `json:"name"`
		Traceback string `json:"traceback"`
	} `json:"error"`
	Truncated bool `json:"truncated"`
}

// TestSession drives one session over each transport: the tool list, state
// across cells, a chart as PNG image content, files (text and binary), a long
// command polled to its end, progress notifications, a cancelled cell, and
// the session's sandbox killed when the session ends.
func TestSession(t *testing.T) {
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) {
			cs, cl := connect(t, kind, srv.Key)
			checkToolList(t, cs)
			id := checkState(t, cs)
			checkChart(t, cs)
			checkFiles(t, cs, id)
			checkLongCommand(t, cs, cl)
			checkCancel(t, cs, id)
			if err := cs.Close(); err != nil {
				t.Logf("close: %v", err)
			}
			waitGone(t, id, 30*time.Second)
		})
	}
}

func checkToolList(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 30 || tool.InputSchema == nil {
			t.Errorf("tool %s: description %q, schema %v", tool.Name, tool.Description, tool.InputSchema)
		}
	}
	for _, want := range allTools {
		if !slices.Contains(names, want) {
			t.Errorf("tool %s missing from %v", want, names)
		}
	}
}

// checkState runs x = 1 then x + 1 in the session's own sandbox.
func checkState(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	var first, second cell
	call(t, cs, "run_code", map[string]any{"code": "x = 1\nprint('set')"}, &first)
	res := call(t, cs, "run_code", map[string]any{"code": "x + 1"}, &second)
	if second.Sandbox != first.Sandbox || first.Sandbox == "" {
		t.Fatalf("cells ran in %q and %q: want the same session sandbox", first.Sandbox, second.Sandbox)
	}
	if first.Stdout != "set\n" || len(second.Results) != 1 || second.Results[0].Text != "2" || !second.Results[0].IsMainResult {
		t.Fatalf("x + 1: %+v / %+v", first, second)
	}
	if !strings.Contains(text(res), "2") {
		t.Fatalf("text content %q lacks the result", text(res))
	}
	if sandboxState(t, first.Sandbox) != "running" {
		t.Fatalf("session sandbox %s not running", first.Sandbox)
	}
	return first.Sandbox
}

func checkChart(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	var out cell
	res := call(t, cs, "run_code", map[string]any{
		"code": "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nplt.show()",
	}, &out)
	var png []byte
	for _, c := range res.Content {
		if img, ok := c.(*mcp.ImageContent); ok && img.MIMEType == "image/png" {
			png = img.Data
		}
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 1000 {
		t.Fatalf("no PNG image content (%d bytes); results %+v", len(png), out.Results)
	}
	if len(out.Results) == 0 || out.Results[0].Image != "image/png" {
		t.Fatalf("results %+v: want an image/png result", out.Results)
	}
}

func checkFiles(t *testing.T, cs *mcp.ClientSession, id string) {
	t.Helper()
	var w struct {
		Path string `json:"path"`
		Size int    `json:"size"`
	}
	call(t, cs, "file_write", map[string]any{"path": "notes/hello.txt", "content": "héllo\n"}, &w)
	if w.Path != "/home/user/notes/hello.txt" || w.Size != 7 {
		t.Fatalf("file_write = %+v", w)
	}
	var r struct {
		Text     string `json:"text"`
		Encoding string `json:"encoding"`
		Size     int    `json:"size"`
	}
	call(t, cs, "file_read", map[string]any{"path": "/home/user/notes/hello.txt", "sandbox": id}, &r)
	if r.Text != "héllo\n" || r.Encoding != "utf-8" || r.Size != 7 {
		t.Fatalf("file_read = %+v", r)
	}
	blob := []byte{0, 1, 2, 0xff, 0xfe, 'x'}
	call(t, cs, "file_write", map[string]any{"path": "bin.dat", "content": base64.StdEncoding.EncodeToString(blob), "encoding": "base64"}, nil)
	res := call(t, cs, "file_read", map[string]any{"path": "bin.dat"}, &r)
	var got []byte
	for _, c := range res.Content {
		if er, ok := c.(*mcp.EmbeddedResource); ok {
			got = er.Resource.Blob
		}
	}
	if !bytes.Equal(got, blob) || r.Encoding != "binary" {
		t.Fatalf("binary read: %v %+v", got, r)
	}
	var l struct {
		Entries []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"entries"`
	}
	call(t, cs, "file_list", map[string]any{"path": "notes"}, &l)
	if len(l.Entries) != 1 || l.Entries[0].Name != "hello.txt" || l.Entries[0].Type != "file" {
		t.Fatalf("file_list = %+v", l)
	}
}

type command struct {
	PID      int    `json:"pid"`
	Running  bool   `json:"running"`
	ExitCode *int   `json:"exit_code"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
}

// checkLongCommand starts a command that outlives wait_seconds, polls it to
// its end, and checks progress notifications carried its output.
func checkLongCommand(t *testing.T, cs *mcp.ClientSession, cl *client) {
	t.Helper()
	var first command
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Meta: mcp.Meta{"progressToken": "cmd-1"},
		Arguments: map[string]any{"command": "for i in 1 2 3 4; do echo tick $i; sleep 1; done; echo done >&2", "wait_seconds": 2}})
	if err != nil || res.IsError {
		t.Fatalf("run_command: %v %s", err, text(res))
	}
	decode(t, res, &first)
	if !first.Running || first.PID <= 0 || first.ExitCode != nil || !strings.Contains(first.Stdout, "tick 1") {
		t.Fatalf("first answer %+v: want running with a pid and the first ticks", first)
	}
	stdout, stderr := first.Stdout, first.Stderr
	for deadline := time.Now().Add(time.Minute); ; {
		var p command
		call(t, cs, "command_output", map[string]any{"pid": first.PID, "wait_seconds": 2}, &p)
		stdout, stderr = stdout+p.Stdout, stderr+p.Stderr
		if !p.Running {
			if p.ExitCode == nil || *p.ExitCode != 0 {
				t.Fatalf("ended without exit code 0: %+v", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("command still running after a minute")
		}
	}
	if stdout != "tick 1\ntick 2\ntick 3\ntick 4\n" || stderr != "done\n" {
		t.Fatalf("collected stdout %q stderr %q", stdout, stderr)
	}
	if msgs := strings.Join(cl.progressMessages(), ""); !strings.Contains(msgs, "tick 1") {
		t.Fatalf("progress notifications %q lack the output", msgs)
	}
	// Polled again, the ended process is either still known to envd (its
	// end is reported once more) or gone (a tool error saying so).
	res = callRaw(t, ctx, cs, "command_output", map[string]any{"pid": first.PID})
	var again command
	if decode(t, res, &again); !res.IsError && (again.Running || again.ExitCode == nil || *again.ExitCode != 0) ||
		res.IsError && !strings.Contains(text(res), "no process") {
		t.Fatalf("polling an ended, already reported process: %s", text(res))
	}
}

// checkCancel cancels a running cell and checks the kernel was interrupted:
// the next cell answers at once with the state intact.
func checkCancel(t *testing.T, cs *mcp.ClientSession, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_code",
			Arguments: map[string]any{"code": "import time\nfor i in range(600):\n    time.sleep(0.1)"}})
		errc <- err
	}()
	time.Sleep(2 * time.Second)
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("the cancelled call returned a result")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled call did not return")
	}
	var next cell
	call(t, cs, "run_code", map[string]any{"code": "x + 1"}, &next)
	if len(next.Results) != 1 || next.Results[0].Text != "2" || next.Sandbox != id {
		t.Fatalf("after cancel: %+v", next)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("the cell after a cancel took until %s: the cancelled one was not interrupted", took)
	}
}
