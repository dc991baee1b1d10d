package security

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// envdUnauthorized is envd's 401 body (E2B wire §1.4).
const envdUnauthorized = `{"code":401,"message":"unauthorized access, please provide a valid access token or method signing if supported"}`

// interpreterCall sends one request to the code interpreter of sandbox id
// through the gateway (routing headers, port 49999), with X-Access-Token
// token unless it is empty, and returns the status and body.
func (s *server) interpreterCall(t *testing.T, id, token, method, path, body string) (int, string) {
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
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("X-Access-Token", token)
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

// TestInterpreterRoutesNeedToken: with --interpreter-auth all, every code-
// interpreter route of a secured sandbox but /health answers 401 with envd's
// body to a caller without the sandbox's access token (or with a wrong one),
// and nothing changes; with the token every route works.
func TestInterpreterRoutesNeedToken(t *testing.T) {
	s := startServer(t, "--interpreter-auth", "all")
	sbx := s.create(t, "code-interpreter")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	victim, err := sbx.CreateCodeContext(ctx, &sdk.CodeContextOptions{Language: "python"})
	if err != nil {
		t.Fatalf("create a context with the SDK (token on every call): %v", err)
	}
	if _, err := sbx.RunCode(ctx, "kept = 6 * 7", &sdk.RunCodeOptions{Context: victim}); err != nil {
		t.Fatal(err)
	}
	before, err := sbx.ListCodeContexts(ctx)
	if err != nil {
		t.Fatal(err)
	}

	attacks := []struct{ method, path, body string }{
		{"GET", "/contexts", ""},
		{"POST", "/contexts", `{"language":"python"}`},
		{"POST", "/contexts/" + victim.ID + "/restart", ""},
		{"DELETE", "/contexts/" + victim.ID, ""},
		{"POST", "/execute", `{"code":"kept = 0","context_id":"` + victim.ID + `"}`},
	}
	for _, token := range []string{"", "not-the-token"} {
		for _, a := range attacks {
			code, body := s.interpreterCall(t, sbx.ID(), token, a.method, a.path, a.body)
			if code != http.StatusUnauthorized || body != envdUnauthorized {
				t.Errorf("%s %s with token %q: %d %s, want 401 %s", a.method, a.path, token, code, body, envdUnauthorized)
			}
		}
	}
	if code, _ := s.interpreterCall(t, sbx.ID(), "", "GET", "/health", ""); code != http.StatusOK {
		t.Errorf("GET /health without a token: %d, want 200", code)
	}
	after, err := sbx.ListCodeContexts(ctx)
	if err != nil || len(after) != len(before) {
		t.Fatalf("contexts before %v, after the attempts %v (%v)", before, after, err)
	}
	if ex, err := sbx.RunCode(ctx, "kept", &sdk.RunCodeOptions{Context: victim}); err != nil || ex.Text() != "42" {
		t.Fatalf("the context's state after the attempts: %+v, %v", ex, err)
	}

	// With the token every route works, raw and through the SDK.
	tok := sbx.AccessToken()
	if code, body := s.interpreterCall(t, sbx.ID(), tok, "GET", "/contexts", ""); code != 200 || !strings.Contains(body, victim.ID) {
		t.Fatalf("GET /contexts with the token: %d %s", code, body)
	}
	code, body := s.interpreterCall(t, sbx.ID(), tok, "POST", "/contexts", `{"language":"python"}`)
	var made sdk.CodeContext
	if code != 200 || json.Unmarshal([]byte(body), &made) != nil || made.ID == "" {
		t.Fatalf("POST /contexts with the token: %d %s", code, body)
	}
	for _, r := range []struct{ method, path string }{
		{"POST", "/contexts/" + made.ID + "/restart"}, {"DELETE", "/contexts/" + made.ID},
	} {
		if code, body := s.interpreterCall(t, sbx.ID(), tok, r.method, r.path, ""); code/100 != 2 {
			t.Errorf("%s %s with the token: %d %s", r.method, r.path, code, body)
		}
	}
	if err := sbx.RestartCodeContext(ctx, victim.ID); err != nil {
		t.Errorf("SDK restart: %v", err)
	}
	if err := sbx.RemoveCodeContext(ctx, victim.ID); err != nil {
		t.Errorf("SDK remove: %v", err)
	}
}
