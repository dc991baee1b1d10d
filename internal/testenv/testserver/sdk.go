package testserver

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// Bounds of the Go SDK helpers.
const (
	// requestTimeout is Conn's per-request timeout.
	requestTimeout = 2 * time.Minute
	// createTimeout bounds Create.
	createTimeout = 3 * time.Minute
	// runTimeout bounds RunAs; the command itself gets commandTimeout.
	runTimeout     = 3 * time.Minute
	commandTimeout = 170 * time.Second
)

// Conn returns Go SDK connection options for the server: its address as the
// API and sandbox URL, its key, and a two-minute request timeout.
func (s *Server) Conn() sdk.ConnectionOptions { return s.ConnAs("") }

// ConnAs is Conn with API key key instead of the server's own ("" = its own),
// e.g. another team's key from TeamKey.
func (s *Server) ConnAs(key string) sdk.ConnectionOptions {
	if key == "" {
		key = s.Key
	}
	u := s.URL("")
	return sdk.ConnectionOptions{APIKey: key, APIURL: u, SandboxURL: u, RequestTimeout: requestTimeout}
}

// Create creates a sandbox through the Go SDK (bounded by 3 minutes) and
// kills it when t ends. It fills in opts: Template "base" when empty and,
// when opts.APIURL is empty, the connection ConnAs(opts.APIKey). A failed
// create fails t with the server's log tail.
func (s *Server) Create(t testing.TB, opts *sdk.CreateOptions) *sdk.Sandbox {
	t.Helper()
	if opts.Template == "" {
		opts.Template = "base"
	}
	if opts.APIURL == "" {
		opts.ConnectionOptions = s.ConnAs(opts.APIKey)
	}
	ctx, cancel := context.WithTimeout(context.Background(), createTimeout)
	defer cancel()
	sbx, err := sdk.Create(ctx, opts)
	if err != nil {
		t.Fatalf("create sandbox: %v\n%s", err, s.Log())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sbx.Kill(ctx)
		_ = sbx.Close()
	})
	return sbx
}

// Healthy fails t unless the server answers GET /health with 200.
func (s *Server) Healthy(t testing.TB) {
	t.Helper()
	resp, err := http.Get(s.URL("/health"))
	if err != nil {
		t.Fatalf("server health: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("server health: %d", resp.StatusCode)
	}
}

// Result is the outcome of a command run inside a sandbox.
type Result struct {
	Out  string // stdout followed by stderr
	Code int    // exit code
}

// RunAs runs cmd with bash -c in sbx as user through the Go SDK ("" = the
// sandbox's default user; "root" for an attacker's usual identity) and
// returns its output and exit code. A non-zero exit is not an error; a
// failure to run at all fails t. The command may run 170 s.
func RunAs(t testing.TB, sbx *sdk.Sandbox, user, cmd string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	res, err := sbx.Commands.Run(ctx, cmd, &sdk.CommandOptions{User: user, Timeout: commandTimeout})
	var exit *sdk.CommandExitError
	switch {
	case errors.As(err, &exit):
		return Result{Out: exit.Stdout + exit.Stderr, Code: exit.ExitCode}
	case err != nil:
		t.Fatalf("run %q as %q: %v", cmd, user, err)
	}
	return Result{Out: res.Stdout + res.Stderr, Code: res.ExitCode}
}

// AsRoot runs cmd as root inside sbx (see RunAs).
func AsRoot(t testing.TB, sbx *sdk.Sandbox, cmd string) Result {
	t.Helper()
	return RunAs(t, sbx, "root", cmd)
}
