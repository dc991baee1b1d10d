package controlplane

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/admission"
	"github.com/cubby-dev/cubby/internal/store"
)

// teamKey creates an API key for team through the service, as `cubby keys
// create --team` does.
func (h *harness) teamKey(team string) string {
	h.t.Helper()
	key, rec, err := h.svc.CreateTeamAPIKey(context.Background(), "test", team)
	if err != nil || rec.Team != team {
		h.t.Fatalf("CreateTeamAPIKey(%s) = %+v, %v", team, rec, err)
	}
	return key
}

// listIDs returns the IDs GET path lists for key.
func (h *harness) listIDs(key, path string) []string {
	h.t.Helper()
	r := h.doKey(key, "GET", path, nil)
	if r.status != http.StatusOK {
		h.t.Fatalf("list %s: %d %s", path, r.status, r.body)
	}
	var list []struct {
		SandboxID string `json:"sandboxID"`
	}
	r.json(h.t, &list)
	ids := make([]string, len(list))
	for i, sb := range list {
		ids[i] = sb.SandboxID
	}
	return ids
}

// TestOtherTeamSeesNothing: every sandbox route answers another team's key
// exactly as for an absent sandbox, and the sandbox is untouched.
func TestOtherTeamSeesNothing(t *testing.T) {
	h := newHarness(t, Config{})
	mine := h.create(map[string]any{"timeout": 600, "envVars": map[string]string{"SECRET": "v"}})
	other := h.teamKey("other")
	theirs := h.createAs(other, map[string]any{"timeout": 600})
	absent := "zzzzzzzzzzzzzzzzzzzz"

	routes := []struct{ method, path string }{
		{"GET", "/sandboxes/%s"},
		{"DELETE", "/sandboxes/%s"},
		{"POST", "/sandboxes/%s/timeout"},
		{"POST", "/sandboxes/%s/connect"},
		{"POST", "/v2/sandboxes/%s/connect"},
		{"POST", "/sandboxes/%s/pause"},
		{"GET", "/sandboxes/%s/metrics"},
		{"GET", "/sandboxes/%s/logs"},
	}
	for _, rt := range routes {
		var body any
		if strings.HasSuffix(rt.path, "/timeout") {
			body = map[string]any{"timeout": 0}
		}
		got := h.doKey(other, rt.method, strings.Replace(rt.path, "%s", mine, 1), body)
		msg := wantError(t, got, http.StatusNotFound)
		want := wantError(t, h.doKey(other, rt.method, strings.Replace(rt.path, "%s", absent, 1), body), http.StatusNotFound)
		if msg != strings.Replace(want, absent, mine, 1) {
			t.Errorf("%s %s: another team's sandbox answers %q, an absent one %q", rt.method, rt.path, msg, want)
		}
	}
	for _, path := range []string{"/sandboxes", "/v2/sandboxes", "/v2/sandboxes?state=running,paused"} {
		if ids := h.listIDs(other, path); len(ids) != 1 || ids[0] != theirs {
			t.Errorf("other team lists %v on %s, want only %s", ids, path, theirs)
		}
		if ids := h.listIDs(h.key, path); len(ids) != 1 || ids[0] != mine {
			t.Errorf("default team lists %v on %s, want only %s", ids, path, mine)
		}
	}
	rec := h.record(mine)
	if rec.State != store.StateRunning || rec.Team != store.DefaultTeam || time.Until(rec.EndAt) < 500*time.Second || !h.fake.has(mine) {
		t.Fatalf("the sandbox was touched: %+v", rec)
	}
	// The owner still does everything.
	if r := h.do("GET", "/sandboxes/"+mine, nil); r.status != 200 || !strings.Contains(string(r.body), rec.AccessToken) {
		t.Fatalf("owner get: %d %s", r.status, r.body)
	}
	if r := h.do("DELETE", "/sandboxes/"+mine, nil); r.status != 204 {
		t.Fatalf("owner kill: %d %s", r.status, r.body)
	}
	if r := h.doKey(other, "DELETE", "/sandboxes/"+theirs, nil); r.status != 204 {
		t.Fatalf("other team kills its own: %d %s", r.status, r.body)
	}
}

// TestEnvKeyIsDefaultTeam: CUBBY_API_KEY and stored default keys share sandboxes.
func TestEnvKeyIsDefaultTeam(t *testing.T) {
	envKey := "e2b_" + strings.Repeat("cd", 20)
	h := newHarness(t, Config{EnvAPIKey: envKey})
	id := h.createAs(envKey, map[string]any{})
	if r := h.do("GET", "/sandboxes/"+id, nil); r.status != 200 {
		t.Fatalf("stored default key cannot see the CUBBY_API_KEY sandbox: %d", r.status)
	}
	if ids := h.listIDs(h.teamKey("other"), "/v2/sandboxes"); len(ids) != 0 {
		t.Fatalf("other team lists %v", ids)
	}
}

func TestInvalidTeamName(t *testing.T) {
	h := newHarness(t, Config{})
	for _, team := range []string{"", "Other", "a b", "-x", strings.Repeat("a", 64), "\x00server"} {
		if _, _, err := h.svc.CreateTeamAPIKey(context.Background(), "k", team); !errors.Is(err, ErrInvalidTeam) {
			t.Errorf("team %q: %v, want ErrInvalidTeam", team, err)
		}
	}
}

// wantTooMany asserts a 429 in E2B's error shape and returns its message.
func wantTooMany(t *testing.T, r response) string {
	t.Helper()
	return wantError(t, r, http.StatusTooManyRequests)
}

func TestTeamSandboxLimit(t *testing.T) {
	h := newHarness(t, Config{Admission: admission.Limits{TeamSandboxes: 2}})
	a := h.create(map[string]any{})
	h.create(map[string]any{})
	before := len(h.fake.creates)
	msg := wantTooMany(t, h.do("POST", "/v2/sandboxes", map[string]any{}))
	if !strings.Contains(msg, "limit of 2 live sandboxes") || len(h.fake.creates) != before {
		t.Fatalf("refusal %q; backend creates %d -> %d", msg, before, len(h.fake.creates))
	}
	// v1 too, and a paused sandbox still counts.
	wantTooMany(t, h.do("POST", "/sandboxes", map[string]any{}))
	if r := h.do("POST", "/sandboxes/"+a+"/pause", nil); r.status != 204 {
		t.Fatalf("pause: %d", r.status)
	}
	wantTooMany(t, h.do("POST", "/v2/sandboxes", map[string]any{}))
	// Another team has its own count.
	h.createAs(h.teamKey("other"), map[string]any{})
	if r := h.do("DELETE", "/sandboxes/"+a, nil); r.status != 204 {
		t.Fatalf("kill: %d", r.status)
	}
	h.create(map[string]any{})
}

func TestMemoryLimits(t *testing.T) {
	h := newHarness(t, Config{DefaultMemoryMB: 512, Admission: admission.Limits{TeamMemoryMB: 1024, ServerMemoryMB: 1536}})
	h.create(map[string]any{})
	h.create(map[string]any{})
	msg := wantTooMany(t, h.do("POST", "/v2/sandboxes", map[string]any{}))
	if !strings.Contains(msg, "memory limit") {
		t.Fatalf("team memory refusal: %q", msg)
	}
	other := h.teamKey("other")
	id := h.createAs(other, map[string]any{"timeout": 1})
	msg = wantTooMany(t, h.doKey(other, "POST", "/v2/sandboxes", map[string]any{}))
	if !strings.Contains(msg, "server is at capacity") {
		t.Fatalf("server memory refusal: %q", msg)
	}
	h.waitKilled(id, 10*time.Second) // the TTL frees its memory
	h.createAs(other, map[string]any{})
}

func TestCreateRateLimit(t *testing.T) {
	h := newHarness(t, Config{Admission: admission.Limits{CreateRate: 2, CreateBurst: 2}})
	h.create(map[string]any{})
	h.create(map[string]any{})
	r := h.do("POST", "/v2/sandboxes", map[string]any{})
	msg := wantTooMany(t, r)
	secs, err := strconv.Atoi(r.header.Get("Retry-After"))
	if !strings.Contains(msg, "faster than the limit of 2 per second") || err != nil || secs != 1 {
		t.Fatalf("rate refusal %q, Retry-After %q", msg, r.header.Get("Retry-After"))
	}
	h.createAs(h.teamKey("other"), map[string]any{}) // its own bucket
	time.Sleep(600 * time.Millisecond)
	h.create(map[string]any{})
}

// TestFailedCreateReleasesAdmission: a create the backend fails does not
// keep its slot.
func TestFailedCreateReleasesAdmission(t *testing.T) {
	h := newHarness(t, Config{Admission: admission.Limits{TeamSandboxes: 1}})
	h.fake.mu.Lock()
	h.fake.createErr = errors.New("no runc today")
	h.fake.mu.Unlock()
	for range 3 {
		if r := h.do("POST", "/v2/sandboxes", map[string]any{}); r.status != 500 {
			t.Fatalf("failing create: %d %s", r.status, r.body)
		}
	}
	h.fake.mu.Lock()
	h.fake.createErr = nil
	h.fake.mu.Unlock()
	h.create(map[string]any{})
}

// TestAdmissionSurvivesRestart: re-adopted sandboxes count against the limits
// and keep their team.
func TestAdmissionSurvivesRestart(t *testing.T) {
	h := newHarness(t, Config{Admission: admission.Limits{TeamSandboxes: 1}})
	other := h.teamKey("other")
	id := h.createAs(other, map[string]any{"timeout": 600})
	h.stop()
	h.start()
	wantTooMany(t, h.doKey(other, "POST", "/v2/sandboxes", map[string]any{}))
	wantError(t, h.do("GET", "/sandboxes/"+id, nil), http.StatusNotFound)
	if r := h.doKey(other, "DELETE", "/sandboxes/"+id, nil); r.status != 204 {
		t.Fatalf("kill after restart: %d", r.status)
	}
	h.createAs(other, map[string]any{})
}

// TestWakeIgnoresTeams: the gateway's auto-resume acts for the server.
func TestWakeIgnoresTeams(t *testing.T) {
	h := newHarness(t, Config{})
	other := h.teamKey("other")
	id := h.createAs(other, map[string]any{"lifecycle": map[string]any{"onTimeout": "pause", "autoResume": true}})
	if r := h.doKey(other, "POST", "/sandboxes/"+id+"/pause", nil); r.status != 204 {
		t.Fatalf("pause: %d", r.status)
	}
	if rt, ok, err := h.svc.Wake(context.Background(), id); err != nil || !ok || !rt.Running {
		t.Fatalf("wake = %+v, %v, %v", rt, ok, err)
	}
}
