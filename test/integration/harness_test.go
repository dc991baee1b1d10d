// Package integration starts the real `cubby serve` binary (CUBBY_BIN) with real
// runc sandboxes and drives it over its public wire protocol: the E2B REST API and
// envd's Connect RPC through the gateway.
package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/envdpb/filesystem/filesystemconnect"
	"github.com/cubby-dev/cubby/internal/envdpb/process"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
)

// server is one running `cubby serve` process.
type server struct {
	t       *testing.T
	bin     string
	dataDir string
	addr    string
	key     string
	args    []string
	cmd     *exec.Cmd
	logPath string
	mu      sync.Mutex
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startServer starts cubby serve on a free port with its own bridge and subnet and
// a shared templates directory (so the base template is built once per machine).
func startServer(t *testing.T) *server {
	t.Helper()
	bin := os.Getenv("CUBBY_BIN")
	if bin == "" {
		t.Skip("CUBBY_BIN not set; run through `make test-integration`")
	}
	if os.Geteuid() != 0 {
		t.Skip("integration tests need root")
	}
	tdir := os.Getenv("CUBBY_TEMPLATES_DIR")
	if tdir == "" {
		wd, _ := os.Getwd()
		tdir = filepath.Join(wd, "..", "..", ".cache", "templates")
	}
	suffix := randHex(2)
	s := &server{
		t: t, bin: bin, dataDir: t.TempDir(), key: "e2b_" + randHex(20),
		addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
	}
	s.logPath = filepath.Join(s.dataDir, "server.log")
	s.args = []string{"serve", "--listen", s.addr, "--data-dir", s.dataDir, "--templates-dir", tdir,
		"--bridge", "cbit" + suffix, "--subnet", freeSubnet(t),
		"--domain", "cubby.test"}
	s.start()
	t.Cleanup(s.removeHostNetwork)
	t.Cleanup(s.stop)
	return s
}

// freeSubnet picks a random 10.x.y.0/24 that no route on the host uses (other
// servers on this shared machine have their own bridges and subnets).
func freeSubnet(t *testing.T) string {
	t.Helper()
	routes, err := exec.Command("ip", "-4", "route", "show").Output()
	if err != nil {
		t.Fatalf("ip route: %v", err)
	}
	for range 1000 {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		subnet := fmt.Sprintf("10.%d.%d.0/24", 100+int(b[0])%150, b[1])
		if !strings.Contains(string(routes), subnet) {
			return subnet
		}
	}
	t.Fatal("no free 10.x.y.0/24 subnet")
	return ""
}

// removeHostNetwork deletes the server's bridge and nftables table once it has
// stopped (the server keeps them across restarts by design).
func (s *server) removeHostNetwork() {
	for i, a := range s.args {
		if a == "--bridge" && i+1 < len(s.args) {
			br := s.args[i+1]
			_ = exec.Command("ip", "link", "del", br).Run()
			_ = exec.Command("nft", "delete", "table", "inet", "cubby_"+br).Run()
		}
	}
}

func (s *server) start() {
	s.t.Helper()
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Env = append(os.Environ(), "CUBBY_API_KEY="+s.key)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(25 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + s.addr + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("server did not become healthy; log:\n%s", s.log())
}

// kill9 SIGKILLs the server (sandboxes keep running) and waits for it to exit.
func (s *server) kill9() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *server) stop() {
	// Kill every sandbox first so nothing outlives the test.
	var list []map[string]any
	if code := s.api("GET", "/v2/sandboxes?state=running,paused", nil, &list); code == 200 {
		for _, sb := range list {
			s.api("DELETE", "/sandboxes/"+sb["sandboxID"].(string), nil, nil)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	if s.t.Failed() {
		s.t.Logf("server log:\n%s", s.log())
	}
}

func (s *server) log() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

// api calls the control plane; out (if non-nil) receives the JSON body. It returns the status.
func (s *server) api(method, path string, body any, out any) int {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+s.addr+path, rd)
	req.Header.Set("X-API-KEY", s.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

// sandbox is a created sandbox and its envd clients through the gateway.
type sandbox struct {
	ID    string
	Token string
	s     *server
	Proc  processconnect.ProcessClient
	FS    filesystemconnect.FilesystemClient
}

func (s *server) create(t *testing.T, body map[string]any) *sandbox {
	t.Helper()
	if body == nil {
		body = map[string]any{}
	}
	if _, ok := body["templateID"]; !ok {
		body["templateID"] = "base"
	}
	var out map[string]any
	if code := s.api("POST", "/v2/sandboxes", body, &out); code != 201 {
		t.Fatalf("create: status %d: %v\n%s", code, out, s.log())
	}
	sb := &sandbox{ID: out["sandboxID"].(string), s: s}
	sb.Token, _ = out["envdAccessToken"].(string)
	hc := &http.Client{Transport: &sandboxTransport{id: sb.ID, token: sb.Token}}
	base := "http://" + s.addr
	sb.Proc = processconnect.NewProcessClient(hc, base, connect.WithProtoJSON())
	sb.FS = filesystemconnect.NewFilesystemClient(hc, base, connect.WithProtoJSON())
	t.Cleanup(func() { s.api("DELETE", "/sandboxes/"+sb.ID, nil, nil) })
	return sb
}

// sandboxTransport adds the gateway's routing headers and the envd token.
type sandboxTransport struct {
	id, token string
	port      string
}

func (st *sandboxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("E2b-Sandbox-Id", st.id)
	port := st.port
	if port == "" {
		port = "49983"
	}
	r.Header.Set("E2b-Sandbox-Port", port)
	if st.token != "" {
		r.Header.Set("X-Access-Token", st.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// run executes a bash command in the sandbox and returns stdout+stderr and the exit code.
func (sb *sandbox) run(ctx context.Context, t *testing.T, cmd string) (string, int32) {
	t.Helper()
	stdin := false
	stream, err := sb.Proc.Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}},
		Stdin:   &stdin,
	}))
	if err != nil {
		t.Fatalf("start %q: %v", cmd, err)
	}
	defer stream.Close()
	var out strings.Builder
	exit := int32(-100)
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil {
			out.Write(d.GetStdout())
			out.Write(d.GetStderr())
		}
		if e := ev.GetEnd(); e != nil {
			exit = e.GetExitCode()
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("run %q: %v (output %q)", cmd, err, out.String())
	}
	return out.String(), exit
}

func (sb *sandbox) envdURL(path string) string { return "http://" + sb.s.addr + path }
