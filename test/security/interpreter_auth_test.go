package security

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// envdUnauthorized is envd's 401 body (docs/wire/e2b-api.md §1.4).
const envdUnauthorized = `{"code":401,"message":"unauthorized access, please provide a valid access token or method signing if supported"}`

// Ports of a sandbox reached through the gateway.
const (
	interpreterPort = 49999
	envdPort        = 49983
)

// creds are the headers a caller sends: X-Access-Token and
// E2B-Traffic-Access-Token, each left out when empty.
type creds struct{ access, traffic string }

// sandboxCall sends one request to port of sandbox id through the gateway
// (routing headers) with the headers of c, and returns the status and body.
func (s *server) sandboxCall(t *testing.T, id string, port int, c creds, method, path, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+s.Addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(port))
	req.Header.Set("Content-Type", "application/json")
	if c.access != "" {
		req.Header.Set("X-Access-Token", c.access)
	}
	if c.traffic != "" {
		req.Header.Set("E2B-Traffic-Access-Token", c.traffic)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}

// TestInterpreterRoutesNeedToken: on a secured sandbox (the default), every
// code-interpreter route but /health answers 401 with envd's body to a caller
// who knows the sandbox ID but not its tokens — no token, wrong ones, another
// sandbox's, its traffic token in the access token's header — and nothing
// changes. Either of its own tokens, in the header the official SDKs send it
// in, opens every route; the traffic token opens no envd route, and the
// sandbox's other ports stay public.
func TestInterpreterRoutesNeedToken(t *testing.T) {
	s := startServer(t)
	sbx := s.create(t, "code-interpreter")
	other := s.create(t, "base") // the attacker's own sandbox and tokens
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	victim, err := sbx.CreateCodeContext(ctx, &sdk.CodeContextOptions{Language: "python"})
	if err != nil {
		t.Fatalf("create a context with the SDK: %v", err)
	}
	if _, err := sbx.RunCode(ctx, "kept = 6 * 7", &sdk.RunCodeOptions{Context: victim}); err != nil {
		t.Fatal(err)
	}

	attacks := []struct{ method, path, body string }{
		{"GET", "/contexts", ""},
		{"POST", "/contexts", `{"language":"python","cwd":"/tmp"}`},
		{"POST", "/contexts/" + victim.ID + "/restart", ""},
		{"DELETE", "/contexts/" + victim.ID, ""},
		{"POST", "/execute", `{"code":"kept = 0","context_id":"` + victim.ID + `"}`},
	}
	for _, c := range []creds{{}, {"not-the-token", ""}, {"", "not-the-token"},
		{other.AccessToken(), other.TrafficAccessToken()}, {sbx.TrafficAccessToken(), ""}} {
		for _, a := range attacks {
			code, body := s.sandboxCall(t, sbx.ID(), interpreterPort, c, a.method, a.path, a.body)
			if code != http.StatusUnauthorized || body != envdUnauthorized {
				t.Errorf("%s %s with %+v: %d %s, want 401 %s", a.method, a.path, c, code, body, envdUnauthorized)
			}
		}
	}
	if code, _ := s.sandboxCall(t, sbx.ID(), interpreterPort, creds{}, "GET", "/health", ""); code != http.StatusOK {
		t.Errorf("GET /health without a token: %d, want 200", code)
	}
	// No context was made (the default ones may have come up meanwhile) or removed.
	after, err := sbx.ListCodeContexts(ctx)
	if err != nil || !slices.ContainsFunc(after, func(c sdk.CodeContext) bool { return c.ID == victim.ID }) ||
		slices.ContainsFunc(after, func(c sdk.CodeContext) bool { return c.Cwd == "/tmp" }) {
		t.Fatalf("contexts after the attempts: %+v (%v)", after, err)
	}
	if ex, err := sbx.RunCode(ctx, "kept", &sdk.RunCodeOptions{Context: victim}); err != nil || ex.Text() != "42" {
		t.Fatalf("the context's state after the attempts: %+v, %v", ex, err)
	}

	traffic := sbx.TrafficAccessToken()
	if traffic == "" || traffic == sbx.AccessToken() {
		t.Fatalf("create returned trafficAccessToken %q for a secured sandbox, want its own token", traffic)
	}
	// Either token alone opens every route, as the official SDKs send them.
	for _, c := range []creds{{"", traffic}, {sbx.AccessToken(), ""}} {
		everyRoute(t, s, sbx.ID(), c)
	}
	if code, body := s.sandboxCall(t, sbx.ID(), envdPort, creds{"", traffic}, "GET", "/envs", ""); code != http.StatusUnauthorized {
		t.Errorf("envd GET /envs with the traffic token only: %d %s, want 401", code, body)
	}
	if err := sbx.RestartCodeContext(ctx, victim.ID); err != nil {
		t.Errorf("SDK restart: %v", err)
	}
	if err := sbx.RemoveCodeContext(ctx, victim.ID); err != nil {
		t.Errorf("SDK remove: %v", err)
	}
	publicPortOpen(t, s, sbx)
}

// everyRoute creates, lists, runs code in, restarts and deletes a code
// context of sandbox id with the headers of c, failing on any refusal.
func everyRoute(t *testing.T, s *server, id string, c creds) {
	t.Helper()
	code, body := s.sandboxCall(t, id, interpreterPort, c, "POST", "/contexts", `{"language":"python"}`)
	var made sdk.CodeContext
	if code != 200 || json.Unmarshal([]byte(body), &made) != nil || made.ID == "" {
		t.Fatalf("POST /contexts with %+v: %d %s", c, code, body)
	}
	if code, body := s.sandboxCall(t, id, interpreterPort, c, "GET", "/contexts", ""); code != 200 || !strings.Contains(body, made.ID) {
		t.Errorf("GET /contexts with %+v: %d %s", c, code, body)
	}
	exec := `{"code":"print(6 * 7)","context_id":"` + made.ID + `"}`
	if code, body := s.sandboxCall(t, id, interpreterPort, c, "POST", "/execute", exec); code != 200 || !strings.Contains(body, `42\n`) {
		t.Errorf("POST /execute with %+v: %d %s", c, code, body)
	}
	for _, r := range []struct{ method, path string }{
		{"POST", "/contexts/" + made.ID + "/restart"}, {"DELETE", "/contexts/" + made.ID},
	} {
		if code, body := s.sandboxCall(t, id, interpreterPort, c, r.method, r.path, ""); code/100 != 2 {
			t.Errorf("%s %s with %+v: %d %s", r.method, r.path, c, code, body)
		}
	}
}

// publicPortOpen: the sandbox was created with public traffic allowed, so a
// server it runs on another port answers without any token, although the
// sandbox now has a traffic token.
func publicPortOpen(t *testing.T, s *server, sbx *sdk.Sandbox) {
	t.Helper()
	if r := run(t, sbx, "", "mkdir -p /tmp/pub && echo public > /tmp/pub/index.html && "+
		"(cd /tmp/pub && nohup python3 -m http.server 8000 >/dev/null 2>&1 &)"); r.Code != 0 {
		t.Fatalf("start a server on port 8000: %+v", r)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, body := s.sandboxCall(t, sbx.ID(), 8000, creds{}, "GET", "/index.html", "")
		if code == 200 && body == "public\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("port 8000 without a token: %d %s, want 200", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestTrafficTokenKept: the traffic token a sandbox claimed from the warm
// pool gets still guards its code interpreter, and is still the one connect
// returns and the interpreter accepts, after a filesystem pause (the agent
// starts again) and after a server restart.
func TestTrafficTokenKept(t *testing.T) {
	s := startServer(t, "--pool", "code-interpreter=1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s.waitPoolReady(t, ctx)
	sbx := s.create(t, "code-interpreter")
	if hits, err := s.Metric(ctx, `^cubby_pool_claims_total\{outcome="hit"`); err != nil || hits != 1 {
		t.Fatalf("pool claims: %v, %v; want the sandbox from the warm pool", hits, err)
	}
	traffic := sbx.TrafficAccessToken()
	guarded(t, s, sbx.ID(), traffic, "claimed from the pool")
	code, made := s.sandboxCall(t, sbx.ID(), interpreterPort, creds{"", traffic}, "POST", "/contexts", `{"language":"python"}`)
	if code != http.StatusOK {
		t.Fatalf("POST /contexts with the traffic token: %d %s", code, made)
	}

	if _, err := sbx.Pause(ctx, &sdk.PauseOptions{KeepMemory: new(false)}); err != nil {
		t.Fatalf("pause to the filesystem: %v", err)
	}
	connectGuarded(ctx, t, s, sbx.ID(), traffic, "after a filesystem pause and resume")
	var ctxID struct{ ID string }
	_ = json.Unmarshal([]byte(made), &ctxID)
	if _, list := s.sandboxCall(t, sbx.ID(), interpreterPort, creds{"", traffic}, "GET", "/contexts", ""); ctxID.ID == "" || strings.Contains(list, ctxID.ID) {
		t.Fatalf("context %q still listed after a filesystem pause (%s): the agent did not start again", ctxID.ID, list)
	}

	s.Kill9()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	connectGuarded(ctx, t, s, sbx.ID(), traffic, "after a server restart")
}

// connectGuarded connects to sandbox id (resuming it when paused), wants
// traffic as its trafficAccessToken and checks it is guarded.
func connectGuarded(ctx context.Context, t *testing.T, s *server, id, traffic, when string) {
	t.Helper()
	sbx, err := sdk.Connect(ctx, id, &sdk.ConnectOptions{ConnectionOptions: s.conn("")})
	if err != nil {
		t.Fatalf("%s: connect: %v", when, err)
	}
	defer sbx.Close()
	if sbx.TrafficAccessToken() != traffic {
		t.Fatalf("%s: connect returned trafficAccessToken %q, want %q", when, sbx.TrafficAccessToken(), traffic)
	}
	guarded(t, s, id, traffic, when)
}

// guarded checks that sandbox id has a traffic token, and that its code
// contexts can be listed with it (waiting for a starting agent) and not
// without any token.
func guarded(t *testing.T, s *server, id, traffic, when string) {
	t.Helper()
	if traffic == "" {
		t.Fatalf("%s: no trafficAccessToken", when)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body := s.sandboxCall(t, id, interpreterPort, creds{"", traffic}, "GET", "/contexts", "")
		if code == http.StatusOK {
			break
		}
		if code != http.StatusBadGateway || time.Now().After(deadline) { // 502 while the agent starts
			t.Fatalf("%s: GET /contexts with the traffic token: %d %s, want 200", when, code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := s.sandboxCall(t, id, interpreterPort, creds{}, "GET", "/contexts", ""); code != http.StatusUnauthorized {
		t.Errorf("%s: GET /contexts without a token: %d %s, want 401", when, code, body)
	}
}
