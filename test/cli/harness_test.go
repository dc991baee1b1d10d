// Package cli tests the `cubby` command line end to end: it starts the real
// `cubby serve` (CUBBY_BIN, as root) with its own data directory, bridge and
// subnet and the shared templates directory (CUBBY_TEMPLATES_DIR, default
// <repo>/.cache/templates), then runs the same binary's client commands
// against it and checks their output, files and exit statuses.
package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// server is the `cubby serve` the tests talk to.
type server struct {
	bin          string
	addr         string // host:port
	key          string // accepted API key (CUBBY_API_KEY)
	dataDir      string
	templatesDir string
	bridge       string
	logPath      string
	cmd          *exec.Cmd
	exited       chan struct{}
}

// srv is the shared server; nil when the tests skip (skipReason says why).
var (
	srv        *server
	skipReason string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	bin := os.Getenv("CUBBY_BIN")
	switch {
	case bin == "":
		skipReason = "CUBBY_BIN not set; build with `make -s build` and set CUBBY_BIN=$PWD/bin/cubby"
		return m.Run()
	case os.Geteuid() != 0:
		skipReason = "starting cubby serve needs root"
		return m.Run()
	}
	s, err := startServer(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "test/cli setup:", err)
		return 1
	}
	srv = s
	code := m.Run()
	s.stop(code != 0)
	return code
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startServer starts cubby serve on a free port with its own bridge, subnet
// and data directory, and waits until it is healthy.
func startServer(bin string) (*server, error) {
	tdir := os.Getenv("CUBBY_TEMPLATES_DIR")
	if tdir == "" {
		wd, _ := os.Getwd()
		tdir = filepath.Join(wd, "..", "..", ".cache", "templates")
	}
	dataDir, err := os.MkdirTemp("", "cubby-cli-test-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &server{
		bin: bin, addr: fmt.Sprintf("127.0.0.1:%d", port), key: "e2b_" + randHex(20), dataDir: dataDir,
		templatesDir: tdir, bridge: "cbct" + randHex(2), logPath: filepath.Join(dataDir, "server.log"),
		exited: make(chan struct{}),
	}
	logf, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(bin, "serve", "--listen", s.addr, "--data-dir", dataDir, "--templates-dir", tdir,
		"--bridge", s.bridge, "--subnet", pickSubnet(), "--domain", "cubby.test")
	s.cmd.Env = append(os.Environ(), "CUBBY_API_KEY="+s.key)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitHealthy(); err != nil {
		s.stop(true)
		return nil, err
	}
	return s, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// pickSubnet returns a random 10.x.y.0/24 that no host interface uses.
func pickSubnet() string {
	var used []netip.Prefix
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				used = append(used, p.Masked())
			}
		}
	}
	for {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		p := netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 200+int(b[0])%40, int(b[1])%250))
		clash := false
		for _, u := range used {
			clash = clash || u.Overlaps(p)
		}
		if !clash {
			return p.String()
		}
	}
}

func (s *server) waitHealthy() error {
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	deadline := time.Now().Add(25 * time.Minute) // the first start may build the base template
	for time.Now().Before(deadline) {
		if resp, err := hc.Get("http://" + s.addr + "/health"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("cubby serve exited before becoming healthy:\n%s", s.logTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("cubby serve did not become healthy:\n%s", s.logTail())
}

// stop kills every sandbox (with the CLI itself), stops the server, removes
// its bridge, nftables table and data directory; showLog prints its log tail.
func (s *server) stop(showLog bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if r := s.runCLI(ctx, runOpts{}, "sandbox", "list", "--json"); r.code == 0 {
		var list []struct{ SandboxID string }
		if json.Unmarshal([]byte(r.stdout), &list) == nil {
			for _, sb := range list {
				s.runCLI(ctx, runOpts{}, "sandbox", "kill", sb.SandboxID)
			}
		}
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	if showLog {
		fmt.Fprintf(os.Stderr, "--- cubby serve log (tail) ---\n%s\n", s.logTail())
	}
	_ = exec.Command("nft", "delete", "table", "inet", "cubby_"+s.bridge).Run()
	_ = exec.Command("ip", "link", "del", s.bridge).Run()
	_ = os.RemoveAll(s.dataDir)
}

func (s *server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 12000 {
		b = b[len(b)-12000:]
	}
	return string(b)
}

// need returns the shared server or skips the test.
func need(t *testing.T) *server {
	t.Helper()
	if srv == nil {
		t.Skip(skipReason)
	}
	return srv
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
		extra = []string{"E2B_API_KEY=" + s.key, "E2B_API_URL=http://" + s.addr}
	}
	return append(out, extra...)
}

// runCLI runs the cubby binary with args and returns its outputs and status.
func (s *server) runCLI(ctx context.Context, o runOpts, args ...string) result {
	cmd := exec.CommandContext(ctx, s.bin, args...)
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
	for _, tp := range decode[[]tmpl](t, s.ok(t, "template", "list", "--json", "--templates-dir", s.templatesDir)) {
		if tp.Name == name {
			return true
		}
	}
	return false
}
