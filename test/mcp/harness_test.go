// Package mcptest drives Cubby's MCP tools end to end with the official MCP
// Go SDK's client: `cubby mcp` over stdio and `cubby serve`'s /mcp over
// streamable HTTP, against one real server (CUBBY_BIN) with real sandboxes.
// TestPythonClient repeats the core calls with the official Python `mcp`
// package (test/mcp/python).
package mcptest

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// srv is the server every test of the package uses (started by TestMain).
var srv *testserver.Server

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, testserver.Options{BridgePrefix: "cbmcp"}, &srv))
}

// transports are the two ways a client reaches the tools.
var transports = []string{"stdio", "http"}

// client collects what a session received besides results.
type client struct {
	mu       sync.Mutex
	progress []string
}

func (c *client) progressMessages() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.progress...)
}

// connect opens an MCP session over kind ("stdio": `cubby mcp` as a child
// process; "http": the server's /mcp with key) and closes it when the test ends.
func connect(t testing.TB, kind, key string) (*mcp.ClientSession, *client) {
	t.Helper()
	c := &client{}
	mc := mcp.NewClient(&mcp.Implementation{Name: "cubby-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, req.Params.Message)
			c.mu.Unlock()
		},
	})
	var tr mcp.Transport
	switch kind {
	case "stdio":
		cmd := exec.Command(srv.Bin, "mcp")
		cmd.Env = append(os.Environ(), "E2B_API_URL=http://"+srv.Addr, "E2B_SANDBOX_URL=http://"+srv.Addr, "E2B_API_KEY="+key)
		cmd.Stderr = testWriter{t}
		tr = &mcp.CommandTransport{Command: cmd}
	case "http":
		tr = &mcp.StreamableClientTransport{Endpoint: srv.URL("/mcp"), HTTPClient: keyClient(key, true)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mc.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect over %s: %v", kind, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, c
}

// keyClient sends key with every request: as X-API-KEY, or as a bearer token.
func keyClient(key string, bearer bool) *http.Client {
	return &http.Client{Transport: headerRT{key: key, bearer: bearer}}
}

type headerRT struct {
	key    string
	bearer bool
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.bearer {
		r.Header.Set("Authorization", "Bearer "+h.key)
	} else {
		r.Header.Set("X-API-KEY", h.key)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// testWriter logs a child's stderr into the test.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// call calls tool with args and fails the test on a protocol error or a
// tool error; out (if non-nil) receives the structured result.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	res := callRaw(t, context.Background(), cs, tool, args)
	if res.IsError {
		t.Fatalf("%s(%v): tool error: %s", tool, args, text(res))
	}
	if out != nil {
		decode(t, res, out)
	}
	return res
}

// decode unmarshals a result's structured content into out.
func decode(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
}

// callRaw calls tool and fails only on a protocol error.
func callRaw(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s(%v): %v", tool, args, err)
	}
	return res
}

// text joins the text content of a result.
func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// sandboxState returns the state of sandbox id through the REST API ("" when
// it is gone).
func sandboxState(t *testing.T, id string) string {
	t.Helper()
	info, err := sdk.GetInfo(context.Background(), id, new(srv.Conn()))
	if err != nil {
		return ""
	}
	return string(info.State)
}

// waitGone waits until sandbox id no longer exists.
func waitGone(t *testing.T, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if sandboxState(t, id) == "" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("sandbox %s still exists %s later", id, within)
}
