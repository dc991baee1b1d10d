package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agentapi"
)

// TestInterpreterAuth drives the code interpreter's guard with each route the
// official SDKs call, with and without the token, in both modes.
func TestInterpreterAuth(t *testing.T) {
	const token = "tok-3a9f"
	reached := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	routes := []struct{ method, path string }{
		{"POST", "/execute"}, {"GET", "/contexts"}, {"POST", "/contexts"},
		{"POST", "/contexts/c1/restart"}, {"DELETE", "/contexts/c1"}, {"GET", "/health"},
	}
	for _, tc := range []struct {
		mode   string
		secure bool
		open   map[string]bool // routes reachable without the token
	}{
		{agentapi.InterpreterAuthExecute, true, map[string]bool{"GET /contexts": true, "POST /contexts": true,
			"POST /contexts/c1/restart": true, "DELETE /contexts/c1": true, "GET /health": true}},
		{agentapi.InterpreterAuthAll, true, map[string]bool{"GET /health": true}},
		{agentapi.InterpreterAuthAll, false, nil}, // unsecured sandbox: everything open
	} {
		s := settings.New()
		if tc.secure {
			s.Apply(agentapi.InitRequest{AccessToken: token})
		}
		h := interpreterAuth(reached, s, tc.mode == agentapi.InterpreterAuthAll)
		for _, rt := range routes {
			name := rt.method + " " + rt.path
			for _, tok := range []string{"", "wrong", token} {
				req := httptest.NewRequest(rt.method, rt.path, nil)
				if tok != "" {
					req.Header.Set("X-Access-Token", tok)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				allowed := !tc.secure || tok == token || tc.open[name]
				switch {
				case allowed && rec.Code != http.StatusTeapot:
					t.Errorf("%s secure=%v %s token %q: %d, want the route reached", tc.mode, tc.secure, name, tok, rec.Code)
				case !allowed && (rec.Code != http.StatusUnauthorized || rec.Body.String() != unauthorizedBody):
					t.Errorf("%s secure=%v %s token %q: %d %s, want 401 with envd's body", tc.mode, tc.secure, name, tok, rec.Code, rec.Body)
				}
			}
		}
	}
}
