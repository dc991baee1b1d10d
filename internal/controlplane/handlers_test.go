package controlplane

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/store"
)

var idPattern = regexp.MustCompile(`^[a-z0-9]{20}$`)

func TestCreateV2AndGetInfo(t *testing.T) {
	h := newHarness(t, Config{Domain: "sbx.example"})
	r := h.do("POST", "/v2/sandboxes", map[string]any{
		"templateID": "base", "timeout": 120,
		"metadata": map[string]string{"a": "b c"}, "envVars": map[string]string{"FOO": "bar"},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var raw map[string]any
	r.json(t, &raw)
	id, _ := raw["sandboxID"].(string)
	if !idPattern.MatchString(id) {
		t.Fatalf("sandboxID %q", id)
	}
	want := map[string]any{"templateID": "tplbase1", "alias": "base", "clientID": clientID,
		"envdVersion": agentapi.EnvdVersion, "domain": "sbx.example"}
	for k, v := range want {
		if got, ok := raw[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	token, _ := raw["envdAccessToken"].(string)
	traffic, _ := raw["trafficAccessToken"].(string)
	if len(token) != 64 || len(traffic) != 64 || traffic == token {
		t.Fatalf("v2 envdAccessToken = %q, trafficAccessToken = %q", token, traffic)
	}
	req := h.fake.lastCreate()
	if req.SandboxID != id || req.RootfsDir != "/rootfs/base" || req.CPUCount != 2 || req.MemoryMB != 512 || req.DiskSizeMB != 1024 {
		t.Fatalf("backend request = %+v", req)
	}
	// The agent gets the link credential only; the gateway checks the tokens.
	if req.Init.AccessToken != agentapi.LinkToken(token) || req.Init.TrafficAccessToken != "" || req.Init.EnvVars["FOO"] != "bar" ||
		req.Init.DefaultUser != "user" || req.Init.DefaultWorkdir != "/home/user" {
		t.Fatalf("init = %+v", req.Init)
	}
	// Public traffic is allowed: the gateway requires no token on its ports.
	rt, ok := h.svc.Route(id)
	if !ok || !rt.Running || rt.AccessToken != token || rt.TrafficToken != "" || rt.InterpreterToken != traffic || !rt.Addr.IsValid() || rt.HostIface == "" {
		t.Fatalf("route = %+v, %v", rt, ok)
	}

	info := h.do("GET", "/sandboxes/"+id, nil)
	if info.status != http.StatusOK {
		t.Fatalf("get: %d %s", info.status, info.body)
	}
	var d struct {
		SandboxID  string            `json:"sandboxID"`
		State      string            `json:"state"`
		Metadata   map[string]string `json:"metadata"`
		StartedAt  time.Time         `json:"startedAt"`
		EndAt      time.Time         `json:"endAt"`
		CPUCount   int               `json:"cpuCount"`
		MemoryMB   int               `json:"memoryMB"`
		DiskSizeMB int               `json:"diskSizeMB"`
		Lifecycle  map[string]any    `json:"lifecycle"`
		ClientID   string            `json:"clientID"`
		Token      string            `json:"envdAccessToken"`
	}
	info.json(t, &d)
	if d.State != "running" || d.Metadata["a"] != "b c" || d.EndAt.Sub(d.StartedAt) != 120*time.Second ||
		d.CPUCount != 2 || d.MemoryMB != 512 || d.DiskSizeMB != 1024 || d.ClientID != clientID || d.Token != token {
		t.Fatalf("detail = %+v", d)
	}
	if d.Lifecycle["onTimeout"] != "kill" || d.Lifecycle["autoResume"] != false {
		t.Fatalf("lifecycle = %v", d.Lifecycle)
	}
}

func TestCreateV1SecureAndDefaults(t *testing.T) {
	h := newHarness(t, Config{})
	r := h.do("POST", "/sandboxes", map[string]any{"templateID": "base"})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var raw map[string]any
	r.json(t, &raw)
	if _, ok := raw["envdAccessToken"]; ok || raw["trafficAccessToken"] != nil {
		t.Fatalf("unsecured v1 sandbox got a token: %s", r.body)
	}
	if v, ok := raw["domain"]; !ok || v != nil {
		t.Fatalf("domain = %v (present %v), want null", v, ok)
	}
	rec := h.record(raw["sandboxID"].(string))
	if rec.EndAt.Sub(rec.StartedAt) != defaultTimeoutV1 || rec.Secure || h.fake.lastCreate().Init.AccessToken != "" {
		t.Fatalf("v1 default record = %+v", rec)
	}

	// Python's body: secure, allow_internet_access, empty maps, explicit timeout.
	r = h.do("POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 300, "metadata": map[string]string{},
		"envVars": map[string]string{}, "secure": true, "allow_internet_access": false})
	if r.status != http.StatusCreated {
		t.Fatalf("create secure: %d %s", r.status, r.body)
	}
	raw = nil
	r.json(t, &raw)
	if tok, _ := raw["envdAccessToken"].(string); tok == "" || raw["trafficAccessToken"] == nil {
		t.Fatalf("secure v1 without tokens: %s", r.body)
	}
	info := h.do("GET", "/sandboxes/"+raw["sandboxID"].(string), nil)
	var d map[string]any
	info.json(t, &d)
	if d["allowInternetAccess"] != false || len(d["metadata"].(map[string]any)) != 0 {
		t.Fatalf("detail = %s", info.body)
	}

	// No template: the default ("base"); v2 default timeout 300 s.
	id := h.create(map[string]any{})
	if rec := h.record(id); rec.TemplateID != "tplbase1" || rec.EndAt.Sub(rec.StartedAt) != defaultTimeoutV2 {
		t.Fatalf("defaults = %+v", rec)
	}
}

func TestCreateNetworkAndLifecycle(t *testing.T) {
	h := newHarness(t, Config{})
	r := h.do("POST", "/v2/sandboxes", map[string]any{
		"templateID": "base-alias", "autoPause": true, "autoResume": map[string]bool{"enabled": true},
		"network": map[string]any{"allowPublicTraffic": false, "denyOut": []string{"0.0.0.0/0"}},
	})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sb map[string]any
	r.json(t, &sb)
	traffic, _ := sb["trafficAccessToken"].(string)
	if traffic == "" || sb["alias"] != "base" { // the template's name, whichever alias the create gave
		t.Fatalf("create body = %s", r.body)
	}
	id := sb["sandboxID"].(string)
	if rt, _ := h.svc.Route(id); rt.TrafficToken != traffic {
		t.Fatalf("route traffic token = %q", rt.TrafficToken)
	}
	if !h.fake.lastCreate().NoInternet {
		t.Fatal("denyOut of all traffic did not block internet access")
	}
	info := h.do("GET", "/sandboxes/"+id, nil)
	body := string(info.body)
	if !strings.Contains(body, `"denyOut":["0.0.0.0/0"]`) ||
		!strings.Contains(body, `"lifecycle":{"autoResume":true,"onTimeout":"pause"}`) {
		t.Fatalf("detail = %s", body)
	}
}

// TestCreateRejectsBadNetwork: invalid network options are a 400 naming the
// field, and no sandbox is created.
func TestCreateRejectsBadNetwork(t *testing.T) {
	h := newHarness(t, Config{})
	header := func(v string) map[string]any {
		return map[string]any{"api.example.com": []map[string]any{{"transform": map[string]any{"headers": map[string]string{"A": v}}}}}
	}
	for field, network := range map[string]map[string]any{
		"network.allowOut[1]":     {"allowOut": []string{"1.1.1.1", "not a domain!"}, "denyOut": []string{"0.0.0.0/0"}},
		"network.allowOut":        {"allowOut": []string{"example.com"}},
		"network.denyOut[0]":      {"denyOut": []string{"example.com"}},
		`network.rules["*"]`:      {"rules": map[string]any{"*": []any{}}},
		"network.rules: secret":   {"rules": header("Bearer ${e2b.secrets.missing}")},
		`network.rules["api.ex`:   {"rules": header("a\r\nb")},
		"network.egressProxy":     {"egressProxy": map[string]string{"address": "proxy"}},
		"network.httpsPorts[0]":   {"httpsPorts": []int{49983}},
		"network.maskRequestHost": {"maskRequestHost": "bad host!"},
	} {
		msg := wantError(t, h.do("POST", "/v2/sandboxes", map[string]any{"network": network}), 400)
		if !strings.Contains(msg, field) {
			t.Errorf("%v: message %q does not name %s", network, msg, field)
		}
	}
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	if len(h.fake.creates) != 0 {
		t.Fatalf("rejected creates reached the backend: %d", len(h.fake.creates))
	}
}

func TestCreateErrors(t *testing.T) {
	h := newHarness(t, Config{MaxTimeout: time.Hour})
	msg := wantError(t, h.do("POST", "/v2/sandboxes", map[string]any{"templateID": "nope"}), 404)
	if msg != "template 'nope' not found" {
		t.Fatalf("unknown template message %q", msg)
	}
	// A built-in template that is not built says how to build it.
	msg = wantError(t, h.do("POST", "/v2/sandboxes", map[string]any{"templateID": "code-interpreter"}), 404)
	if !strings.Contains(msg, "cubby template build code-interpreter") {
		t.Fatalf("unbuilt built-in template message %q", msg)
	}
	wantError(t, h.do("POST", "/v2/sandboxes", `{"templateID":`), 400)
	wantError(t, h.do("POST", "/v2/sandboxes", `{"timeout":"x"}`), 400)
	wantError(t, h.do("POST", "/sandboxes", nil), 400)
	wantError(t, h.do("POST", "/v2/sandboxes", map[string]any{"timeout": 3601}), 400)
	wantError(t, h.do("POST", "/v2/sandboxes", map[string]any{"timeout": -1}), 400)
	wantError(t, h.do("POST", "/v2/sandboxes", map[string]any{"volumeMounts": []map[string]string{{"name": "v", "path": "/v"}}}), 400)
	wantError(t, h.do("POST", "/v2/sandboxes", map[string]any{"envVars": map[string]string{"A=B": "x"}}), 400)
	wantError(t, h.do("POST", "/v2/sandboxes", map[string]any{"lifecycle": map[string]any{"onTimeout": "explode"}}), 400)

	h.fake.mu.Lock()
	h.fake.createErr = errors.New("runc exploded")
	h.fake.mu.Unlock()
	msg = wantError(t, h.do("POST", "/v2/sandboxes", map[string]any{}), 500)
	if !strings.Contains(msg, "runc exploded") {
		t.Fatalf("500 message %q lacks the cause", msg)
	}
	failed := h.fake.lastCreate().SandboxID
	rec := h.record(failed)
	if rec.State != store.StateKilled || !strings.Contains(rec.KillReason, "runc exploded") {
		t.Fatalf("failed create left record %+v", rec)
	}
	if _, ok := h.svc.Route(failed); ok {
		t.Fatal("failed create has a route")
	}
}

func TestConcurrentCreates(t *testing.T) {
	h := newHarness(t, Config{})
	const n = 16
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r := h.do("POST", "/v2/sandboxes", map[string]any{"templateID": "base"})
			if r.status != http.StatusCreated {
				t.Errorf("create %d: %d %s", i, r.status, r.body)
				return
			}
			var sb struct{ SandboxID string }
			r.json(t, &sb)
			ids[i] = sb.SandboxID
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
	if got := len(h.svc.Routes()); got != n {
		t.Fatalf("routes = %d, want %d", got, n)
	}
}

func TestKill(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{})
	r := h.do("DELETE", "/sandboxes/"+id, nil)
	if r.status != http.StatusNoContent || len(r.body) != 0 {
		t.Fatalf("kill: %d %q", r.status, r.body)
	}
	h.waitKilled(id, 5*time.Second)
	if h.fake.has(id) {
		t.Fatal("backend still runs the sandbox")
	}
	if _, ok := h.svc.Route(id); ok {
		t.Fatal("killed sandbox still routed")
	}
	if rec := h.record(id); rec.State != store.StateKilled || rec.KillReason != reasonRequest || rec.KilledAt.IsZero() {
		t.Fatalf("record = %+v", rec)
	}
	wantError(t, h.do("DELETE", "/sandboxes/"+id, nil), 404)
	wantError(t, h.do("DELETE", "/sandboxes/doesnotexist", nil), 404)
	wantError(t, h.do("GET", "/sandboxes/"+id, nil), 404)
	wantError(t, h.do("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 10}), 404)
	wantError(t, h.do("POST", "/v2/sandboxes/"+id+"/connect", map[string]any{}), 404)
	wantError(t, h.do("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 10}), 404)
	wantError(t, h.do("POST", "/sandboxes/"+id+"/pause", map[string]any{}), 404)
	wantError(t, h.do("GET", "/sandboxes/"+id+"/metrics", nil), 404)
}

func TestTimeoutReplacesConnectExtends(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{"timeout": 600})
	endAt := func() time.Time { return h.record(id).EndAt }

	before := time.Now()
	if r := h.do("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 60}); r.status != 204 {
		t.Fatalf("timeout: %d %s", r.status, r.body)
	}
	shortened := endAt()
	if shortened.Before(before.Add(59*time.Second)) || shortened.After(time.Now().Add(61*time.Second)) {
		t.Fatalf("timeout 60 gave endAt %v (now %v)", shortened, time.Now())
	}
	// connect with a shorter timeout keeps the later deadline.
	r := h.do("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 5})
	if r.status != http.StatusOK {
		t.Fatalf("connect: %d %s", r.status, r.body)
	}
	if got := endAt(); !got.Equal(shortened) {
		t.Fatalf("connect shortened endAt %v -> %v", shortened, got)
	}
	// connect with a longer timeout extends; an empty body means 300 s.
	r = h.do("POST", "/v2/sandboxes/"+id+"/connect", nil)
	if r.status != http.StatusOK {
		t.Fatalf("connect v2: %d %s", r.status, r.body)
	}
	if got := endAt(); got.Before(before.Add(299 * time.Second)) {
		t.Fatalf("connect did not extend: %v", got)
	}
	wantError(t, h.do("POST", "/sandboxes/"+id+"/timeout", nil), 400)
	wantError(t, h.do("POST", "/sandboxes/"+id+"/timeout", map[string]any{}), 400)
	wantError(t, h.do("POST", "/sandboxes/"+id+"/timeout", `{"timeout":`), 400)
	wantError(t, h.do("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 100000}), 400)
}

func TestTTLKill(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{"timeout": 1})
	end := h.record(id).EndAt
	killedAt := h.waitKilled(id, 10*time.Second)
	if killedAt.Before(end) {
		t.Fatalf("killed at %v before deadline %v", killedAt, end)
	}
	rec := h.waitState(id, store.StateKilled)
	if rec.KillReason != reasonTimeout || h.fake.has(id) {
		t.Fatalf("record after TTL = %+v", rec)
	}
	// A timeout of 0 kills at once.
	id2 := h.create(map[string]any{"timeout": 600})
	if r := h.do("POST", "/sandboxes/"+id2+"/timeout", map[string]any{"timeout": 0}); r.status != 204 {
		t.Fatalf("timeout 0: %d %s", r.status, r.body)
	}
	h.waitKilled(id2, 10*time.Second)
}

func TestPauseConnectResume(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{})
	if r := h.do("POST", "/sandboxes/"+id+"/pause", map[string]any{}); r.status != 204 {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	h.waitKilled(id, 5*time.Second) // OnKill cuts connections on pause too
	if rt, ok := h.svc.Route(id); !ok || rt.Running {
		t.Fatalf("paused route = %+v, %v", rt, ok)
	}
	wantError(t, h.do("POST", "/sandboxes/"+id+"/pause", nil), 409)
	wantError(t, h.do("POST", "/sandboxes/"+id+"/timeout", map[string]any{"timeout": 30}), 404)
	var d struct{ State string }
	h.do("GET", "/sandboxes/"+id, nil).json(t, &d)
	if d.State != "paused" {
		t.Fatalf("state = %q", d.State)
	}
	r := h.do("GET", "/v2/sandboxes?state=paused", nil)
	if !strings.Contains(string(r.body), id) {
		t.Fatalf("paused list = %s", r.body)
	}
	r = h.do("POST", "/v2/sandboxes/"+id+"/connect", map[string]any{"timeout": 60})
	if r.status != http.StatusCreated {
		t.Fatalf("resume: %d %s", r.status, r.body)
	}
	var tokens struct{ EnvdAccessToken, TrafficAccessToken string }
	r.json(t, &tokens)
	if rec := h.record(id); tokens.TrafficAccessToken == "" || tokens.TrafficAccessToken != rec.TrafficToken ||
		tokens.EnvdAccessToken != rec.AccessToken || h.fake.lastCreate().Init.AccessToken != agentapi.LinkToken(rec.AccessToken) {
		t.Fatalf("resumed sandbox's tokens %+v, record %+v", tokens, rec)
	}
	if rt, _ := h.svc.Route(id); !rt.Running {
		t.Fatal("resumed sandbox not running")
	}
	if r := h.do("POST", "/sandboxes/"+id+"/connect", map[string]any{"timeout": 60}); r.status != http.StatusOK {
		t.Fatalf("connect running: %d %s", r.status, r.body)
	}

	h.fake.mu.Lock()
	h.fake.noPause = true
	h.fake.mu.Unlock()
	wantError(t, h.do("POST", "/sandboxes/"+id+"/pause", nil), 501)
	if rt, _ := h.svc.Route(id); !rt.Running {
		t.Fatal("failed pause changed the route")
	}
}

func TestTTLPauseLifecycle(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{"timeout": 1, "autoPause": true})
	h.waitKilled(id, 10*time.Second)
	if rec := h.record(id); rec.State != store.StatePaused || !h.fake.has(id) {
		t.Fatalf("record after TTL with autoPause = %+v", rec)
	}
	// Without backend pause support the deadline kills instead.
	h.fake.mu.Lock()
	h.fake.noPause = true
	h.fake.mu.Unlock()
	id2 := h.create(map[string]any{"timeout": 1, "lifecycle": map[string]any{"onTimeout": "pause", "autoResume": false}})
	h.waitKilled(id2, 10*time.Second)
	if rec := h.waitState(id2, store.StateKilled); rec.KillReason != reasonTimeout {
		t.Fatalf("record = %+v", rec)
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t, Config{MetricsInterval: 50 * time.Millisecond})
	id := h.create(map[string]any{})
	r := h.do("GET", "/sandboxes/"+id+"/metrics", nil)
	if r.status != http.StatusOK {
		t.Fatalf("metrics: %d %s", r.status, r.body)
	}
	var ms []map[string]any
	r.json(t, &ms)
	if len(ms) < 1 {
		t.Fatalf("no sample right after create: %s", r.body)
	}
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal"} {
		if _, ok := ms[0][k]; !ok {
			t.Fatalf("sample lacks %s: %v", k, ms[0])
		}
	}
	if ms[0]["memTotal"] != float64(512<<20) {
		t.Fatalf("memTotal = %v", ms[0]["memTotal"])
	}
	start := h.record(id).StartedAt.Unix()
	r = h.do("GET", "/sandboxes/"+id+"/metrics?start="+itoa(start-100)+"&end="+itoa(start-50), nil)
	if r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("range before start: %d %s", r.status, r.body)
	}
	now := time.Now().Unix()
	r = h.do("GET", "/sandboxes/"+id+"/metrics?start="+itoa(start)+"&end="+itoa(now+1), nil)
	r.json(t, &ms)
	for _, m := range ms {
		ts := int64(m["timestampUnix"].(float64))
		if ts < start || ts > now+1 {
			t.Fatalf("sample %d outside [%d, %d]", ts, start, now+1)
		}
	}
	wantError(t, h.do("GET", "/sandboxes/"+id+"/metrics?start=10&end=5", nil), 400)
	wantError(t, h.do("GET", "/sandboxes/"+id+"/metrics?start=abc", nil), 400)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func TestRecoveryAfterRestart(t *testing.T) {
	h := newHarness(t, Config{})
	keep := h.create(map[string]any{"timeout": 600, "metadata": map[string]string{"k": "v"}})
	private := h.create(map[string]any{"timeout": 600, "network": map[string]any{"allowPublicTraffic": false}})
	lost := h.create(map[string]any{"timeout": 600})
	overdue := h.create(map[string]any{"timeout": 600})
	paused := h.create(map[string]any{"timeout": 600})
	if r := h.do("POST", "/sandboxes/"+paused+"/pause", nil); r.status != 204 {
		t.Fatalf("pause: %d", r.status)
	}
	h.stop()
	// While the server is down: one sandbox dies, another passes its deadline.
	_ = h.fake.Kill(context.Background(), lost)
	if err := h.store.SetEndAt(context.Background(), overdue, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	h.start()
	if rec := h.record(lost); rec.State != store.StateKilled || rec.KillReason != reasonLost {
		t.Fatalf("lost record = %+v", rec)
	}
	if rec := h.record(overdue); rec.State != store.StateKilled || rec.KillReason != reasonTimeout || h.fake.has(overdue) {
		t.Fatalf("overdue record = %+v", rec)
	}
	if rt, ok := h.svc.Route(keep); !ok || !rt.Running {
		t.Fatalf("kept route = %+v, %v", rt, ok)
	}
	if rt, ok := h.svc.Route(paused); !ok || rt.Running {
		t.Fatalf("paused route = %+v, %v", rt, ok)
	}
	// Traffic tokens survive: the private sandbox's ports still need its own,
	// the public one's need none, and connect returns the same token.
	if rt, _ := h.svc.Route(private); rt.TrafficToken == "" || rt.TrafficToken != h.record(private).TrafficToken {
		t.Fatalf("private route after restart = %+v", rt)
	}
	var tokens struct{ TrafficAccessToken string }
	h.do("POST", "/sandboxes/"+keep+"/connect", map[string]any{"timeout": 600}).json(t, &tokens)
	if rt, _ := h.svc.Route(keep); rt.TrafficToken != "" || tokens.TrafficAccessToken == "" ||
		tokens.TrafficAccessToken != h.record(keep).TrafficToken {
		t.Fatalf("public route after restart = %+v, connect gave %q", rt, tokens.TrafficAccessToken)
	}
	var d struct{ Metadata map[string]string }
	h.do("GET", "/sandboxes/"+keep, nil).json(t, &d)
	if d.Metadata["k"] != "v" {
		t.Fatalf("metadata after restart = %v", d.Metadata)
	}
	// The re-adopted sandbox's TTL is armed again.
	if r := h.do("POST", "/sandboxes/"+keep+"/timeout", map[string]any{"timeout": 1}); r.status != 204 {
		t.Fatalf("timeout: %d", r.status)
	}
	h.waitKilled(keep, 10*time.Second)
}

func TestAuth(t *testing.T) {
	envKey := "e2b_" + strings.Repeat("ab", 20)
	h := newHarness(t, Config{EnvAPIKey: envKey})
	wantError(t, h.doKey("", "GET", "/v2/sandboxes", nil), 401)
	wantError(t, h.doKey("e2b_"+strings.Repeat("0", 40), "GET", "/v2/sandboxes", nil), 401)
	wantError(t, h.doKey("", "GET", "/no/such/route", nil), 401)
	if r := h.doKey(envKey, "GET", "/v2/sandboxes", nil); r.status != 200 {
		t.Fatalf("CUBBY_API_KEY rejected: %d %s", r.status, r.body)
	}
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(h.key) {
		t.Fatalf("generated key %q", h.key)
	}
	if r := h.do("GET", "/v2/sandboxes", nil); r.status != 200 {
		t.Fatalf("stored key rejected: %d", r.status)
	}
	ctx := context.Background()
	if key, created, err := h.svc.EnsureAPIKey(ctx); err != nil || created || key != "" {
		t.Fatalf("second EnsureAPIKey = %q, %v, %v", key, created, err)
	}
	second, rec, err := h.svc.CreateAPIKey(ctx, "ci")
	if err != nil || rec.Mask != "e2b_…"+second[len(second)-4:] {
		t.Fatalf("CreateAPIKey = %q %+v %v", second, rec, err)
	}
	if r := h.doKey(second, "GET", "/sandboxes", nil); r.status != 200 {
		t.Fatalf("new key rejected: %d", r.status)
	}
	if err := h.svc.RevokeAPIKey(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	wantError(t, h.doKey(second, "GET", "/sandboxes", nil), 401)
	if err := h.svc.RevokeAPIKey(ctx, "key_missing"); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("revoke missing: %v", err)
	}
	keys, err := h.svc.ListAPIKeys(ctx)
	if err != nil || len(keys) != 2 || keys[0].LastUsedAt.IsZero() {
		t.Fatalf("keys = %+v, %v", keys, err)
	}
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	h := newHarness(t, Config{})
	wantError(t, h.do("GET", "/no/such/route", nil), 404)
	wantError(t, h.do("GET", "/sandboxes/abc/nothing", nil), 404)
	r := h.do("PUT", "/sandboxes", nil)
	wantError(t, r, 405)
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow = %q", allow)
	}
	wantError(t, h.do("PATCH", "/sandboxes/abc", nil), 405)
	wantError(t, h.do("GET", "/sandboxes/"+url.PathEscape("ABC-def"), nil), 404)
}

func TestKillPausedSandbox(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{})
	if r := h.do("POST", "/sandboxes/"+id+"/pause", nil); r.status != 204 {
		t.Fatalf("pause: %d %s", r.status, r.body)
	}
	h.waitKilled(id, 5*time.Second)
	if r := h.do("DELETE", "/sandboxes/"+id, nil); r.status != 204 {
		t.Fatalf("kill paused: %d %s", r.status, r.body)
	}
	if h.fake.has(id) || h.record(id).State != store.StateKilled {
		t.Fatal("paused sandbox not killed")
	}
	wantError(t, h.do("POST", "/v2/sandboxes/"+id+"/connect", nil), 404)
}

func TestSamplerNoticesVanishedSandbox(t *testing.T) {
	h := newHarness(t, Config{MetricsInterval: 20 * time.Millisecond})
	id := h.create(map[string]any{})
	_ = h.fake.Kill(context.Background(), id) // dies behind the control plane's back
	h.waitKilled(id, 10*time.Second)
	if rec := h.record(id); rec.State != store.StateKilled || rec.KillReason != reasonGone {
		t.Fatalf("record = %+v", rec)
	}
	if _, ok := h.svc.Route(id); ok {
		t.Fatal("vanished sandbox still routed")
	}
}
