package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agentapi"
)

// TestInterpreterAuth drives the code interpreter's guard with each route the
// official SDKs call and every combination of the two headers they send, on
// a secured sandbox with and without a traffic token, and an unsecured one.
func TestInterpreterAuth(t *testing.T) {
	const access, traffic = "access-3a9f", "traffic-77c1"
	reached := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	routes := []struct{ method, path string }{
		{"POST", "/execute"}, {"GET", "/contexts"}, {"POST", "/contexts"},
		{"POST", "/contexts/c1/restart"}, {"DELETE", "/contexts/c1"}, {"GET", "/health"},
		{"GET", "/health/../contexts"}, {"GET", "/nope"},
	}
	type headers struct{ access, traffic string }
	sent := []headers{{}, {"wrong", ""}, {"", "wrong"}, {"wrong", "wrong"}, {access, ""}, {"", traffic},
		{access, "wrong"}, {"wrong", traffic}, {traffic, ""}, {"", access}}
	for _, tc := range []struct {
		name string
		init agentapi.InitRequest
		ok   func(h headers) bool // the headers that must get through
	}{
		{"secured with traffic token", agentapi.InitRequest{AccessToken: access, TrafficAccessToken: traffic},
			func(h headers) bool { return h.access == access || h.traffic == traffic }},
		{"secured without traffic token", agentapi.InitRequest{AccessToken: access},
			func(h headers) bool { return h.access == access }},
		{"unsecured", agentapi.InitRequest{TrafficAccessToken: traffic}, func(headers) bool { return true }},
	} {
		s := settings.New()
		s.Apply(tc.init)
		h := interpreterAuth(reached, s)
		for _, rt := range routes {
			for _, hd := range sent {
				req := httptest.NewRequest(rt.method, rt.path, nil)
				if hd.access != "" {
					req.Header.Set("X-Access-Token", hd.access)
				}
				if hd.traffic != "" {
					req.Header.Set("E2B-Traffic-Access-Token", hd.traffic)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				allowed := rt.path == "/health" || tc.ok(hd)
				switch {
				case allowed && rec.Code != http.StatusTeapot:
					t.Errorf("%s: %s %s with %+v: %d, want the route reached", tc.name, rt.method, rt.path, hd, rec.Code)
				case !allowed && (rec.Code != http.StatusUnauthorized || rec.Body.String() != unauthorizedBody):
					t.Errorf("%s: %s %s with %+v: %d %s, want 401 with envd's body", tc.name, rt.method, rt.path, hd, rec.Code, rec.Body)
				}
			}
		}
	}
}

// TestEnvdRejectsTrafficToken: envd's routes (port 49983) take the access
// token only; the traffic token, which the SDKs hand to code-interpreter
// calls, opens none of them.
func TestEnvdRejectsTrafficToken(t *testing.T) {
	const access, traffic = "access-3a9f", "traffic-77c1"
	a := &Agent{cfg: Config{}, settings: settings.New()}
	a.settings.Apply(agentapi.InitRequest{AccessToken: access, TrafficAccessToken: traffic})
	h := a.requireToken(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tc := range []struct {
		header, value string
		want          int
	}{
		{"E2B-Traffic-Access-Token", traffic, http.StatusUnauthorized},
		{"X-Access-Token", traffic, http.StatusUnauthorized},
		{"X-Access-Token", access, http.StatusTeapot},
	} {
		for _, path := range []string{"/envs", "/metrics", "/init", "/process.Process/Start"} {
			req := httptest.NewRequest("POST", path, nil)
			req.Header.Set(tc.header, tc.value)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s with %s: %d, want %d", path, tc.header, rec.Code, tc.want)
			}
		}
	}
}
