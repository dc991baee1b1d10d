// Package testserver starts a real `cubby serve` process for end-to-end tests.
//
// The binary comes from CUBBY_BIN and must run as root. Each server gets a
// free loopback port, its own data directory, a random API key (passed as
// CUBBY_API_KEY), a bridge with a unique name and a 10.x.y.0/24 subnet no host
// route uses, so several servers can run on one machine at once. The templates
// directory is shared (CUBBY_TEMPLATES_DIR, default <repo>/.cache/templates) so
// the base template is built once per machine.
//
// It also holds what the end-to-end suites under test/ do with a server
// alike: REST calls (API, Call, CallURL), keys of other teams (TeamKey),
// template builds, and the Go SDK helpers (Conn, ConnAs, Create, RunAs,
// AsRoot); what only one suite does stays in its harness_test.go.
package testserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/server"
)

// Default timings of a server's life cycle.
const (
	// DefaultHealthTimeout bounds the wait for /health after a start; the
	// first start on a machine may build the base template.
	DefaultHealthTimeout = 25 * time.Minute
	// stopGrace is how long Stop waits after SIGTERM before SIGKILL.
	stopGrace = 15 * time.Second
	// logTailBytes is how much of the server log Log returns.
	logTailBytes = 12000
)

// Options tune one server. The zero value is usable.
type Options struct {
	// BridgePrefix starts the bridge name; 4 random hex digits follow
	// (at most 11 bytes, Linux names are 15 bytes). Default "cbt".
	BridgePrefix string
	// TemplatesDir overrides CUBBY_TEMPLATES_DIR and the <repo>/.cache/templates default.
	TemplatesDir string
	// Args are extra `cubby serve` flags, e.g. {"--runtime", "runsc", "--domain", "cubby.test"}.
	Args []string
	// HealthTimeout bounds each wait for /health; default DefaultHealthTimeout.
	HealthTimeout time.Duration
}

// Server is one running (or stopped) `cubby serve` process. Its exported
// fields are fixed at start and must not be changed.
type Server struct {
	Bin          string // the cubby binary (CUBBY_BIN)
	Addr         string // host:port of the API and gateway on 127.0.0.1
	Key          string // the accepted API key ("e2b_" + 40 hex digits)
	DataDir      string // --data-dir
	RunDir       string // the server's default run dir (server.DefaultRunDir of DataDir)
	TemplatesDir string // --templates-dir
	Bridge       string // --bridge; its nftables table is "cubby_" + Bridge
	Subnet       string // --subnet, a 10.x.y.0/24
	LogPath      string // server stdout+stderr, appended across restarts

	args          []string
	healthTimeout time.Duration
	ownDataDir    bool // Stop removes DataDir
	client        *http.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// SkipReason returns why a server cannot be started here ("" when it can):
// CUBBY_BIN is unset, or the process is not root.
func SkipReason() string {
	switch {
	case os.Getenv("CUBBY_BIN") == "":
		return "CUBBY_BIN not set; build with `make -s build` and set CUBBY_BIN=$PWD/bin/cubby (or run `make test-integration`)"
	case os.Geteuid() != 0:
		return "starting cubby serve needs root"
	}
	return ""
}

// Start starts a server for one test, skipping the test when SkipReason is
// non-empty and failing it when the server does not become healthy. The
// data directory is a t.TempDir; a cleanup stops the server, removes its
// bridge and nftables table, and logs the server's log tail if t failed.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if reason := SkipReason(); reason != "" {
		t.Skip(reason)
	}
	s, err := newServer(opts, t.TempDir())
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("cubby serve log (tail):\n%s", s.Log())
		}
	})
	if err := s.start(); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	return s
}

// Launch starts a server outside a test (e.g. in TestMain, shared by a
// package). The caller checks SkipReason first and calls Stop when done;
// Stop also removes the data directory Launch created. Errors: no free port
// or subnet, the binary cannot start, or it exits or stays unhealthy (the
// error then carries the log tail).
func Launch(opts Options) (*Server, error) {
	if reason := SkipReason(); reason != "" {
		return nil, errors.New(reason)
	}
	dir, err := os.MkdirTemp("", "cubby-testserver-")
	if err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	s, err := newServer(opts, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.ownDataDir = true
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// newServer picks the port, key, bridge and subnet and builds the argument list.
func newServer(opts Options, dataDir string) (*Server, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	subnet, err := FreeSubnet()
	if err != nil {
		return nil, err
	}
	tdir, err := templatesDir(opts.TemplatesDir)
	if err != nil {
		return nil, err
	}
	prefix := opts.BridgePrefix
	if prefix == "" {
		prefix = "cbt"
	}
	s := &Server{
		Bin: os.Getenv("CUBBY_BIN"), Addr: fmt.Sprintf("127.0.0.1:%d", port), Key: "e2b_" + RandHex(20),
		DataDir: dataDir, RunDir: server.DefaultRunDir(dataDir), TemplatesDir: tdir, Bridge: prefix + RandHex(2), Subnet: subnet,
		LogPath: filepath.Join(dataDir, "server.log"), healthTimeout: opts.HealthTimeout,
		client: &http.Client{Transport: &http.Transport{}},
	}
	if s.healthTimeout == 0 {
		s.healthTimeout = DefaultHealthTimeout
	}
	s.args = append([]string{"serve", "--listen", s.Addr, "--data-dir", dataDir, "--templates-dir", tdir,
		"--bridge", s.Bridge, "--subnet", subnet}, opts.Args...)
	return s, nil
}

// templatesDir resolves the shared templates directory.
func templatesDir(override string) (string, error) {
	if override != "" {
		return override, nil
	}
	if d := os.Getenv("CUBBY_TEMPLATES_DIR"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "templates"), nil
}

// Args returns the full `cubby serve` argument list (a copy).
func (s *Server) Args() []string { return append([]string(nil), s.args...) }

// URL returns "http://" + Addr + path.
func (s *Server) URL(path string) string { return "http://" + s.Addr + path }

// start runs the binary (log appended to LogPath) and waits for /health.
func (s *Server) start() error {
	logf, err := os.OpenFile(s.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("server log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(s.Bin, s.args...)
	cmd.Env = append(os.Environ(), "CUBBY_API_KEY="+s.Key)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.Bin, err)
	}
	exited := make(chan struct{})
	go s.wait(cmd, exited)
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	return s.waitHealthy(exited)
}

// wait reaps cmd and closes exited.
func (s *Server) wait(cmd *exec.Cmd, exited chan struct{}) {
	_ = cmd.Wait()
	close(exited)
}

// waitHealthy polls GET /health every 100 ms until it answers 200.
func (s *Server) waitHealthy(exited <-chan struct{}) error {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	deadline := time.Now().Add(s.healthTimeout)
	for time.Now().Before(deadline) {
		if resp, err := hc.Get(s.URL("/health")); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("cubby serve exited before becoming healthy; log:\n%s", s.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("cubby serve not healthy after %s; log:\n%s", s.healthTimeout, s.Log())
}

// Kill9 SIGKILLs the server and waits for it to exit; its sandboxes keep
// running (crash tests). No-op when it is not running.
func (s *Server) Kill9() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// Restart starts the server again with the same arguments, key and data
// after Kill9 (or Stop) and waits for /health. Errors: as Launch.
func (s *Server) Restart() error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return errors.New("restart: cubby serve is still running")
	}
	return s.start()
}

// Stop kills every running or paused sandbox through the API, sends SIGTERM
// (SIGKILL after 15 s), then removes the bridge and nftables table (the
// server keeps them across restarts by design) and, for Launch, the data
// directory. Safe to call more than once.
func (s *Server) Stop() {
	s.killSandboxes()
	s.mu.Lock()
	if cmd := s.cmd; cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(stopGrace):
			_ = cmd.Process.Kill()
			<-s.exited
		}
		s.cmd = nil
	}
	s.mu.Unlock()
	s.client.CloseIdleConnections()
	removeHostNetwork(s.Bridge)
	ReleaseMounts(s.DataDir)
	ReleaseMounts(s.RunDir)
	_ = os.RemoveAll(s.RunDir)
	if s.ownDataDir {
		_ = os.RemoveAll(s.DataDir)
	}
}

// killSandboxes deletes every sandbox the server lists (best effort).
func (s *Server) killSandboxes() {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if !running {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var list []struct {
		SandboxID string `json:"sandboxID"`
	}
	if code, err := s.API(ctx, "GET", "/v2/sandboxes?state=running,paused", nil, &list); err != nil || code != 200 {
		return
	}
	for _, sb := range list {
		_, _ = s.API(ctx, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil)
	}
}

// Log returns the last 12000 bytes of the server's log ("" if unreadable).
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.LogPath)
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
	}
	return string(b)
}
