package mcptest

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cubby-dev/cubby/sdk"
)

type info struct {
	Sandbox  string            `json:"sandbox"`
	Template string            `json:"template"`
	Alias    string            `json:"alias"`
	State    string            `json:"state"`
	EndAt    time.Time         `json:"end_at"`
	Metadata map[string]string `json:"metadata"`
	Session  bool              `json:"session_sandbox"`
}

// TestLifecycleTools creates a sandbox through sandbox_create, finds it with
// sandbox_list, changes its timeout, pauses and resumes it, reaches a server
// in it through get_url, lists the templates and kills it.
func TestLifecycleTools(t *testing.T) {
	cs, _ := connect(t, "stdio", srv.Key)
	var tpls struct {
		Templates []struct {
			Template string   `json:"template"`
			Aliases  []string `json:"aliases"`
			BuildID  string   `json:"build_id"`
			Status   string   `json:"status"`
		} `json:"templates"`
	}
	call(t, cs, "template_list", nil, &tpls)
	var names []string
	for _, tp := range tpls.Templates {
		names = append(names, tp.Template)
		if tp.BuildID == "" || tp.Status != "ready" {
			t.Errorf("template %+v", tp)
		}
	}
	if !slices.Contains(names, "base") || !slices.Contains(names, "code-interpreter") {
		t.Fatalf("template_list = %v", names)
	}

	var sb info
	call(t, cs, "sandbox_create", map[string]any{"template": "base", "timeout_seconds": 120,
		"metadata": map[string]string{"purpose": "mcp-lifecycle"}}, &sb)
	if sb.Sandbox == "" || sb.Alias != "base" || sb.State != "running" || sb.Session || sb.Metadata["purpose"] != "mcp-lifecycle" {
		t.Fatalf("sandbox_create = %+v", sb)
	}
	t.Cleanup(func() { waitKilled(sb.Sandbox) })
	var list struct {
		Sandboxes []info `json:"sandboxes"`
	}
	call(t, cs, "sandbox_list", map[string]any{"metadata": map[string]string{"purpose": "mcp-lifecycle"}}, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].Sandbox != sb.Sandbox {
		t.Fatalf("sandbox_list by metadata = %+v", list)
	}
	call(t, cs, "sandbox_set_timeout", map[string]any{"sandbox": sb.Sandbox, "timeout_seconds": 3600}, nil)
	var got info
	call(t, cs, "sandbox_info", map[string]any{"sandbox": sb.Sandbox}, &got)
	if d := time.Until(got.EndAt); d < 50*time.Minute || d > 61*time.Minute {
		t.Fatalf("end_at %s after set_timeout 3600", got.EndAt)
	}
	call(t, cs, "sandbox_pause", map[string]any{"sandbox": sb.Sandbox}, nil)
	if st := sandboxState(t, sb.Sandbox); st != "paused" {
		t.Fatalf("after sandbox_pause: %q", st)
	}
	call(t, cs, "sandbox_resume", map[string]any{"sandbox": sb.Sandbox}, nil)
	if st := sandboxState(t, sb.Sandbox); st != "running" {
		t.Fatalf("after sandbox_resume: %q", st)
	}
	checkGetURL(t, cs, sb.Sandbox)
	call(t, cs, "sandbox_kill", map[string]any{"sandbox": sb.Sandbox}, nil)
	if st := sandboxState(t, sb.Sandbox); st != "" {
		t.Fatalf("after sandbox_kill: %q", st)
	}
	res := callRaw(t, context.Background(), cs, "sandbox_info", map[string]any{"sandbox": sb.Sandbox})
	if !res.IsError || !strings.Contains(text(res), "not found") {
		t.Fatalf("info of a killed sandbox: %s", text(res))
	}
}

// checkGetURL starts a web server in the sandbox and fetches it through the
// URL and headers get_url returns.
func checkGetURL(t *testing.T, cs *mcp.ClientSession, id string) {
	t.Helper()
	call(t, cs, "file_write", map[string]any{"sandbox": id, "path": "site/index.html", "content": "hello from the sandbox"}, nil)
	var started command
	call(t, cs, "run_command", map[string]any{"sandbox": id, "cwd": "/home/user/site",
		"command": "python3 -m http.server 8080", "wait_seconds": 1}, &started)
	if !started.Running {
		t.Fatalf("http.server ended: %+v", started)
	}
	var u struct {
		URL     string            `json:"url"`
		Headers map[string]string `json:"headers"`
	}
	call(t, cs, "get_url", map[string]any{"sandbox": id, "port": 8080}, &u)
	var code int
	var body string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if code, body = fetch(t, u.URL, u.Headers); code == 200 {
			break
		}
	}
	if code != 200 || body != "hello from the sandbox" {
		t.Fatalf("GET %s with %v = %d %q", u.URL, u.Headers, code, body)
	}
	var killed command
	call(t, cs, "command_kill", map[string]any{"sandbox": id, "pid": started.PID}, &killed)
	if killed.Running || killed.ExitCode == nil || *killed.ExitCode == 0 {
		t.Fatalf("command_kill = %+v", killed)
	}
}

// waitKilled kills sandbox id if a failed test left it running.
func waitKilled(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = sdk.Kill(ctx, id, new(srv.Conn()))
}

// localhostClient resolves every name under .localhost to the loopback
// address, as browsers do (RFC 6761 §6.3): get_url's host-routed URLs
// (<port>-<id>.localhost) must not depend on the host's DNS server.
var localhostClient = &http.Client{Transport: &http.Transport{
	DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, port, err := net.SplitHostPort(addr); err == nil && strings.HasSuffix(host, ".localhost") {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	},
}}

func fetch(t *testing.T, url string, headers map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := localhostClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
