// Package integration starts the real `cubby serve` binary (CUBBY_BIN) with real
// runc sandboxes and drives it over its public wire protocol: the E2B REST API and
// envd's Connect RPC through the gateway.
package integration

import (
	"context"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/envdpb/filesystem/filesystemconnect"
	"github.com/cubby-dev/cubby/internal/envdpb/process"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// server is one running `cubby serve` (testserver) bound to the test that started it.
type server struct {
	*testserver.Server
	t *testing.T
}

func randHex(n int) string { return testserver.RandHex(n) }

// startServer starts cubby serve on a free port with its own bridge and subnet and
// a shared templates directory (so the base template is built once per machine).
func startServer(t *testing.T) *server {
	t.Helper()
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbit", Args: []string{"--domain", "cubby.test"}})
	return &server{Server: ts, t: t}
}

// freeSubnet picks a random 10.x.y.0/24 that no route on the host uses.
func freeSubnet(t testing.TB) string {
	t.Helper()
	subnet, err := testserver.FreeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	return subnet
}

// restart starts the server again after kill9, failing the test if it does not come up.
func (s *server) restart() {
	s.t.Helper()
	if err := s.Restart(); err != nil {
		s.t.Fatal(err)
	}
}

// kill9 SIGKILLs the server (sandboxes keep running) and waits for it to exit.
func (s *server) kill9() { s.Kill9() }

func (s *server) log() string { return s.Log() }

// api calls the control plane; out (if non-nil) receives the JSON body. It returns the status.
func (s *server) api(method, path string, body any, out any) int {
	s.t.Helper()
	code, err := s.API(context.Background(), method, path, body, out)
	if err != nil {
		s.t.Fatal(err)
	}
	return code
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
	return s.attach(t, out)
}

// attach returns the clients of the sandbox a create (or fork) answered with
// out, killed when the test ends.
func (s *server) attach(t *testing.T, out map[string]any) *sandbox {
	t.Helper()
	sb := &sandbox{ID: out["sandboxID"].(string), s: s}
	sb.Token, _ = out["envdAccessToken"].(string)
	hc := &http.Client{Transport: &sandboxTransport{id: sb.ID, token: sb.Token}}
	base := "http://" + s.Addr
	sb.Proc = processconnect.NewProcessClient(hc, base, connect.WithProtoJSON())
	sb.FS = filesystemconnect.NewFilesystemClient(hc, base, connect.WithProtoJSON())
	// Best effort: the test may have stopped the server already.
	t.Cleanup(func() { _, _ = s.API(context.Background(), "DELETE", "/sandboxes/"+sb.ID, nil, nil) })
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
	return sb.runAs(ctx, t, "", cmd)
}

// runAs is run as user ("" = the sandbox's default user), named in envd's
// Basic authorization header.
func (sb *sandbox) runAs(ctx context.Context, t *testing.T, user, cmd string) (string, int32) {
	t.Helper()
	stdin := false
	req := connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}},
		Stdin:   &stdin,
	})
	if user != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
	stream, err := sb.Proc.Start(ctx, req)
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

func (sb *sandbox) envdURL(path string) string { return "http://" + sb.s.Addr + path }
