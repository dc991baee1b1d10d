package security

import (
	"testing"

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
func (s *server) conn(key string) sdk.ConnectionOptions { return s.ConnAs(key) }

// create starts a sandbox of template (default "base") through the SDK with
// the server's key and kills it when the test ends.
func (s *server) create(t *testing.T, template string) *sdk.Sandbox {
	t.Helper()
	return s.Create(t, &sdk.CreateOptions{Template: template})
}

// createWith is create with full options (testserver.Server.Create); the
// connection defaults to the server's own key when opts.APIKey is empty.
func (s *server) createWith(t *testing.T, opts *sdk.CreateOptions) *sdk.Sandbox {
	t.Helper()
	return s.Create(t, opts)
}

// result is the outcome of a command run inside a sandbox.
type result = testserver.Result

// run runs cmd with bash -c in sbx as user ("" = the default user; "root"
// for the attacker's usual identity) and returns its output and exit code
// (testserver.RunAs).
func run(t *testing.T, sbx *sdk.Sandbox, user, cmd string) result {
	t.Helper()
	return testserver.RunAs(t, sbx, user, cmd)
}

// asRoot runs cmd as root inside sbx (see run).
func asRoot(t *testing.T, sbx *sdk.Sandbox, cmd string) result {
	t.Helper()
	return testserver.AsRoot(t, sbx, cmd)
}

// healthy fails the test unless the server answers GET /health with 200.
func (s *server) healthy(t *testing.T) {
	t.Helper()
	s.Healthy(t)
}
