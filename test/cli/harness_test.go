// Package cli tests the `cubby` command line end to end: it starts the real
// `cubby serve` (CUBBY_BIN, as root) with its own data directory, bridge and
// subnet and the shared templates directory (CUBBY_TEMPLATES_DIR, default
// <repo>/.cache/templates), then runs the same binary's client commands
// against it and checks their output, files and exit statuses.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// server is the `cubby serve` the tests talk to (Bin, Addr, Key,
// TemplatesDir come from testserver).
type server struct {
	*testserver.Server
}

// srv is the shared server (started by TestMain).
var srv *testserver.Server

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, testserver.Options{BridgePrefix: "cbct", Args: []string{"--domain", "cubby.test"}}, &srv))
}

func randHex(n int) string { return testserver.RandHex(n) }

// need returns the shared server.
func need(t *testing.T) *server {
	t.Helper()
	return &server{Server: srv}
}

// runOpts tune one CLI run.
type runOpts struct {
	stdin string
	// env replaces the connection variables (E2B_API_KEY, E2B_API_URL) the
	// run would get; nil means the test server's.
	env []string
	dir string
}

// result is a finished CLI run.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout: %q\nstderr: %q", r.code, r.stdout, r.stderr)
}

// env is the environment of a CLI run: the test's without any E2B_ variable,
// plus the connection variables.
func (s *server) env(extra []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") {
			out = append(out, kv)
		}
	}
	if extra == nil {
		extra = []string{"E2B_API_KEY=" + s.Key, "E2B_API_URL=http://" + s.Addr}
	}
	return append(out, extra...)
}

// runCLI runs the cubby binary with args and returns its outputs and status.
func (s *server) runCLI(ctx context.Context, o runOpts, args ...string) result {
	cmd := exec.CommandContext(ctx, s.Bin, args...)
	cmd.Env = s.env(o.env)
	cmd.Dir = o.dir
	cmd.Stdin = strings.NewReader(o.stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		code = -1
		stderr.WriteString("\n[run error: " + err.Error() + "]")
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// cli runs the CLI with a 3-minute limit.
func (s *server) cli(t *testing.T, o runOpts, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return s.runCLI(ctx, o, args...)
}

// ok runs the CLI and fails the test unless it exits 0; it returns stdout.
func (s *server) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := s.cli(t, runOpts{}, args...)
	if r.code != 0 {
		t.Fatalf("cubby %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

// sandboxInfo is the --json form of a sandbox the CLI prints.
type sandboxInfo struct {
	SandboxID  string            `json:"sandboxID"`
	TemplateID string            `json:"templateID"`
	Alias      string            `json:"alias"`
	State      string            `json:"state"`
	Metadata   map[string]string `json:"metadata"`
	EndAt      time.Time         `json:"endAt"`
}

// decode unmarshals the JSON a command printed, failing the test otherwise.
func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	return v
}

// newSandbox creates a sandbox with `cubby sandbox create --json` and kills it
// with `cubby sandbox kill` when the test ends.
func (s *server) newSandbox(t *testing.T, args ...string) sandboxInfo {
	t.Helper()
	info := decode[sandboxInfo](t, s.ok(t, append([]string{"sandbox", "create", "--json"}, args...)...))
	if info.SandboxID == "" {
		t.Fatalf("create printed no sandboxID")
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s.runCLI(ctx, runOpts{}, "sandbox", "kill", info.SandboxID)
	})
	return info
}

// hasTemplate reports whether the templates directory has a built template
// with this name (asked with `cubby template list --json`).
func (s *server) hasTemplate(t *testing.T, name string) bool {
	t.Helper()
	type tmpl struct {
		Name string `json:"name"`
	}
	for _, tp := range decode[[]tmpl](t, s.ok(t, "template", "list", "--json", "--templates-dir", s.TemplatesDir)) {
		if tp.Name == name {
			return true
		}
	}
	return false
}
