package mcptest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// TestBadInput: unknown arguments name the field, a sandbox killed mid-call
// is a tool error saying so (not a hang), huge outputs come back truncated
// with a marker, and code contexts keep separate state.
func TestBadInput(t *testing.T) {
	cs, _ := connect(t, "http", srv.Key)
	ctx := context.Background()

	res := callRaw(t, ctx, cs, "run_code", map[string]any{"code": "1", "bogus_field": true})
	if !res.IsError || !strings.Contains(text(res), "bogus_field") {
		t.Fatalf("unknown argument: %s", text(res))
	}
	res = callRaw(t, ctx, cs, "run_command", map[string]any{"command": "true", "wait_seconds": 100000})
	if !res.IsError || !strings.Contains(text(res), "wait_seconds") {
		t.Fatalf("out-of-range argument: %s", text(res))
	}

	var big cell
	call(t, cs, "run_code", map[string]any{"code": "print('x' * 3_000_000)\nprint('END')"}, &big)
	if !big.Truncated || len(big.Stdout) > 70_000 || !strings.Contains(big.Stdout, "bytes truncated]") || !strings.HasSuffix(big.Stdout, "END\n") {
		t.Fatalf("3 MB of stdout: truncated=%v, %d bytes, tail %q", big.Truncated, len(big.Stdout), tail(big.Stdout))
	}
	var out command
	call(t, cs, "run_command", map[string]any{"command": "head -c 2000000 /dev/zero | tr '\\0' y; echo; echo END"}, &out)
	if len(out.Stdout) > 70_000 || !strings.Contains(out.Stdout, "bytes truncated]") || !strings.HasSuffix(out.Stdout, "END\n") {
		t.Fatalf("2 MB of command output: %d bytes, tail %q", len(out.Stdout), tail(out.Stdout))
	}

	var a, b cell
	call(t, cs, "run_code", map[string]any{"code": "y = 5", "context": "first"}, nil)
	call(t, cs, "run_code", map[string]any{"code": "y", "context": "first"}, &a)
	call(t, cs, "run_code", map[string]any{"code": "y", "context": "second"}, &b)
	if len(a.Results) != 1 || a.Results[0].Text != "5" || b.Error == nil || b.Error.Name != "NameError" {
		t.Fatalf("contexts: first %+v, second %+v", a, b)
	}
}

func tail(s string) string { return s[max(0, len(s)-40):] }

// TestKilledMidCall kills the session's sandbox through the REST API while a
// cell runs in it: the call ends with a tool error saying so, and the next
// call gets a new sandbox with a note that state is gone.
func TestKilledMidCall(t *testing.T) {
	for _, kind := range transports {
		t.Run(kind, func(t *testing.T) {
			cs, _ := connect(t, kind, srv.Key)
			var c cell
			call(t, cs, "run_code", map[string]any{"code": "z = 1"}, &c)
			go func() {
				time.Sleep(2 * time.Second)
				_ = sdk.Kill(context.Background(), c.Sandbox, new(srv.Conn()))
			}()
			start := time.Now()
			res := callRaw(t, context.Background(), cs, "run_code", map[string]any{"code": "import time\ntime.sleep(120)"})
			if !res.IsError || !strings.Contains(text(res), "killed") || !strings.Contains(text(res), c.Sandbox) {
				t.Fatalf("killed mid-call: %s", text(res))
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Fatalf("the killed call returned after %s", took)
			}
			var next cell
			call(t, cs, "run_code", map[string]any{"code": "'z' in globals()"}, &next)
			if next.Sandbox == c.Sandbox || len(next.Results) != 1 || next.Results[0].Text != "False" {
				t.Fatalf("after the kill: %+v", next)
			}
		})
	}
}

// TestHTTPAuth: /mcp refuses requests without a key or with a wrong one, and
// a session created with one key refuses requests carrying another valid key.
// Tools act with the session's key: another team's sandboxes do not exist for
// them.
func TestHTTPAuth(t *testing.T) {
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	post := func(key, session, body string) (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL("/mcp"), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("X-API-KEY", key)
		}
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := post("", "", initBody); resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	if resp, body := post("e2b_"+strings.Repeat("0", 40), "", initBody); resp.StatusCode != 401 {
		t.Fatalf("wrong key: %d %s", resp.StatusCode, body)
	}
	resp, body := post(srv.Key, "", initBody)
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || session == "" || !strings.Contains(body, `"serverInfo"`) {
		t.Fatalf("initialize: %d %q %s", resp.StatusCode, session, body)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if resp, body := post(srv.TeamKey(t, ""), session, list); resp.StatusCode != 403 {
		t.Fatalf("another key on the session: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(srv.Key, session, list); resp.StatusCode != 200 || !strings.Contains(body, "run_code") {
		t.Fatalf("the session's own key: %d %s", resp.StatusCode, body)
	}
	checkOtherTeam(t)
	if log, err := os.ReadFile(srv.LogPath); err != nil || bytes.Contains(log, []byte(srv.Key)) {
		t.Fatalf("the server log contains the API key (or cannot be read: %v)", err)
	}
}

// checkOtherTeam: a session of another team's key cannot see, use or kill a
// sandbox of the default team.
func checkOtherTeam(t *testing.T) {
	t.Helper()
	mine, _ := connect(t, "http", srv.Key)
	var c cell
	call(t, mine, "run_code", map[string]any{"code": "1 + 1"}, &c)
	other, _ := connect(t, "http", srv.TeamKey(t, "other-team"))
	for _, tool := range []string{"sandbox_info", "sandbox_kill", "run_code"} {
		args := map[string]any{"sandbox": c.Sandbox}
		if tool == "run_code" {
			args["code"] = "1"
		}
		res := callRaw(t, context.Background(), other, tool, args)
		if !res.IsError || !strings.Contains(text(res), "not found") {
			t.Fatalf("%s on another team's sandbox: %s", tool, text(res))
		}
	}
	var list struct {
		Sandboxes []info `json:"sandboxes"`
	}
	call(t, other, "sandbox_list", nil, &list)
	for _, sb := range list.Sandboxes {
		if sb.Sandbox == c.Sandbox {
			t.Fatal("another team lists the sandbox")
		}
	}
	if sandboxState(t, c.Sandbox) != "running" {
		t.Fatal("the sandbox did not survive the other team's calls")
	}
}
