package security

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// server is one running `cubby serve` bound to the test that started it.
type server struct {
	*testserver.Server
	t *testing.T
}

// startServer starts cubby serve with its own bridge, subnet and data dir
// (extra serve flags in args) and stops it when the test ends.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbsec", Args: args})
	return &server{Server: ts, t: t}
}

// conn returns SDK connection options for this server with API key key
// ("" = the server's own key).
func (s *server) conn(key string) sdk.ConnectionOptions {
	if key == "" {
		key = s.Key
	}
	url := "http://" + s.Addr
	return sdk.ConnectionOptions{APIKey: key, APIURL: url, SandboxURL: url, RequestTimeout: 2 * time.Minute}
}

// create starts a sandbox of template (default "base") through the SDK with
// the server's key and kills it when the test ends.
func (s *server) create(t *testing.T, template string) *sdk.Sandbox {
	t.Helper()
	return s.createWith(t, &sdk.CreateOptions{Template: template})
}

// createWith is create with full options; the connection defaults to the
// server's own key when opts.APIKey is empty.
func (s *server) createWith(t *testing.T, opts *sdk.CreateOptions) *sdk.Sandbox {
	t.Helper()
	if opts.Template == "" {
		opts.Template = "base"
	}
	if opts.APIURL == "" {
		opts.ConnectionOptions = s.conn(opts.APIKey)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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

// result is the outcome of a command run inside a sandbox.
type result struct {
	Out  string // stdout followed by stderr
	Code int    // exit code
}

// run runs cmd with bash -c in sbx as user ("" = the default user; "root"
// for the attacker's usual identity) and returns its output and exit code.
// A non-zero exit is not an error; a failure to run at all fails the test.
func run(t *testing.T, sbx *sdk.Sandbox, user, cmd string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := sbx.Commands.Run(ctx, cmd, &sdk.CommandOptions{User: user, Timeout: 170 * time.Second})
	var exit *sdk.CommandExitError
	switch {
	case errors.As(err, &exit):
		return result{Out: exit.Stdout + exit.Stderr, Code: exit.ExitCode}
	case err != nil:
		t.Fatalf("run %q as %q: %v", cmd, user, err)
	}
	return result{Out: res.Stdout + res.Stderr, Code: res.ExitCode}
}

// asRoot runs cmd as root inside sbx (see run).
func asRoot(t *testing.T, sbx *sdk.Sandbox, cmd string) result {
	t.Helper()
	return run(t, sbx, "root", cmd)
}

// healthy fails the test unless the server answers GET /health with 200.
func (s *server) healthy(t *testing.T) {
	t.Helper()
	resp, err := http.Get("http://" + s.Addr + "/health")
	if err != nil {
		t.Fatalf("server health: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("server health: %d", resp.StatusCode)
	}
}
