package security

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// teamKey creates an API key of team ("" = without --team) with the real
// `cubby keys create` (testserver.Server.TeamKey) and returns it.
func (s *server) teamKey(t *testing.T, team string) string {
	t.Helper()
	return s.TeamKey(t, team)
}

// e2bError is E2B's control-plane error body.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// call sends one control-plane request with key and returns the status and
// the decoded E2B error body (zero when the body is not one).
func (s *server) call(t *testing.T, key, method, path string, body any) (int, e2bError, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, data, err := s.Call(ctx, key, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	var e e2bError
	_ = json.Unmarshal(data, &e)
	return resp.StatusCode, e, resp.Header
}

// sandboxRoutes are the control-plane routes that act on one sandbox, with
// the body each needs ("%s" is the sandbox ID).
var sandboxRoutes = []struct {
	method, path string
	body         any
}{
	{"GET", "/sandboxes/%s", nil},
	{"POST", "/sandboxes/%s/connect", map[string]any{"timeout": 60}},
	{"POST", "/v2/sandboxes/%s/connect", map[string]any{"timeout": 60}},
	{"POST", "/sandboxes/%s/pause", nil},
	{"POST", "/sandboxes/%s/timeout", map[string]any{"timeout": 0}},
	{"GET", "/sandboxes/%s/metrics", nil},
	{"GET", "/sandboxes/%s/logs", nil},
	{"DELETE", "/sandboxes/%s", nil},
}

// wantAbsent asserts that every sandbox route answers key about id exactly as
// about a sandbox that does not exist: 404 in E2B's shape, same message.
func (s *server) wantAbsent(t *testing.T, key, id string) {
	t.Helper()
	const absent = "zzzzzzzzzzzzzzzzzzzz"
	for _, rt := range sandboxRoutes {
		code, got, _ := s.call(t, key, rt.method, strings.Replace(rt.path, "%s", id, 1), rt.body)
		_, want, _ := s.call(t, key, rt.method, strings.Replace(rt.path, "%s", absent, 1), rt.body)
		if code != http.StatusNotFound || got.Code != 404 || got.Message != strings.Replace(want.Message, absent, id, 1) {
			t.Errorf("%s %s with another team's key: %d %+v; an absent sandbox gets 404 %+v", rt.method, rt.path, code, got, want)
		}
	}
}

// TestTenancyOtherTeamGets404: a key of another team gets 404 on every route
// of a sandbox it does not own, running or paused, cannot list it, and leaves
// it untouched.
func TestTenancyOtherTeamGets404(t *testing.T) {
	s := startServer(t)
	sbx := s.create(t, "base")
	other := s.teamKey(t, "other")
	oc := s.conn(other)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	_, err := sdk.GetInfo(ctx, sbx.ID(), &oc)
	wantNotFound(t, "GetInfo", err)
	_, err = sdk.Connect(ctx, sbx.ID(), &sdk.ConnectOptions{ConnectionOptions: oc, Timeout: time.Minute})
	wantNotFound(t, "Connect", err)
	wantNotFound(t, "Kill", sdk.Kill(ctx, sbx.ID(), &oc))
	s.wantAbsent(t, other, sbx.ID())
	for info, err := range sdk.List(ctx, &sdk.ListOptions{ConnectionOptions: oc}) {
		if err != nil {
			t.Fatal(err)
		}
		if info.SandboxID == sbx.ID() {
			t.Errorf("the other team lists the sandbox: %+v", info)
		}
	}
	if r := run(t, sbx, "", "echo alive"); r.Code != 0 || r.Out != "alive\n" {
		t.Fatalf("the sandbox was touched: %+v", r)
	}
	if info, err := sbx.GetInfo(ctx); err != nil || info.State != sdk.StateRunning || time.Until(info.EndAt) < time.Minute {
		t.Fatalf("owner's view after the attempts: %+v, %v", info, err)
	}

	// Paused: the other team can neither resume nor kill it.
	if _, err := sbx.Pause(ctx, nil); err != nil {
		t.Fatal(err)
	}
	s.wantAbsent(t, other, sbx.ID())
	if info, err := sbx.GetInfo(ctx); err != nil || info.State != sdk.StatePaused {
		t.Fatalf("paused sandbox after the attempts: %+v, %v", info, err)
	}
	if err := sbx.Resume(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if r := run(t, sbx, "", "echo back"); r.Out != "back\n" {
		t.Fatalf("after resume: %+v", r)
	}
	// The other team's own sandboxes work as usual and stay out of the first team's list.
	mine := s.createAs(t, other)
	for info, err := range sdk.List(ctx, &sdk.ListOptions{ConnectionOptions: s.conn("")}) {
		if err != nil {
			t.Fatal(err)
		}
		if info.SandboxID == mine.ID() {
			t.Errorf("the default team lists the other team's sandbox")
		}
	}
	s.wantAbsent(t, s.Key, mine.ID())
}

// createAs creates a base sandbox with key (see createWith).
func (s *server) createAs(t *testing.T, key string) *sdk.Sandbox {
	t.Helper()
	return s.createWith(t, &sdk.CreateOptions{ConnectionOptions: sdk.ConnectionOptions{APIKey: key}})
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	var nf *sdk.NotFoundError
	if !errors.As(err, &nf) || nf.Resource != sdk.ResourceSandbox {
		t.Errorf("%s with another team's key: %T %v, want a sandbox NotFoundError", what, err, err)
	}
}

// createRefused asserts that a create with key is refused with 429 in E2B's
// shape, with a message containing want, and that the SDK reports it as a
// RateLimitError.
func (s *server) createRefused(t *testing.T, key, want string) {
	t.Helper()
	code, e, _ := s.call(t, key, "POST", "/v2/sandboxes", map[string]any{"templateID": "base"})
	if code != http.StatusTooManyRequests || e.Code != 429 || !strings.Contains(e.Message, want) {
		t.Fatalf("create: %d %+v, want 429 with %q", code, e, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := s.conn(key)
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{ConnectionOptions: conn, Template: "base"})
	var rl *sdk.RateLimitError
	if !errors.As(err, &rl) {
		if sbx != nil {
			_ = sbx.Kill(ctx)
		}
		t.Fatalf("SDK create: %T %v, want a RateLimitError", err, err)
	}
}

// TestTenancyMemoryLimits: the per-team and server-wide caps on the memory
// limits of live sandboxes answer 429 and free up when a sandbox ends.
func TestTenancyMemoryLimits(t *testing.T) {
	s := startServer(t, "--memory-mb", "512", "--team-max-sandboxes", "3", "--team-max-memory-mb", "1024",
		"--max-memory-mb", "1536", "--create-rate", "0")
	other := s.teamKey(t, "other")
	a := s.create(t, "base")
	s.create(t, "base")
	s.createRefused(t, s.Key, "memory limit")
	s.createAs(t, other)
	s.createRefused(t, other, "server is at capacity")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	s.createAs(t, other)
}

// TestTenancySandboxLimitAndRate: the per-team cap on live sandboxes and the
// create rate limit answer 429; a warm-pool claim counts like a create.
func TestTenancySandboxLimitAndRate(t *testing.T) {
	s := startServer(t, "--pool", "base=1", "--team-max-sandboxes", "1", "--create-rate", "0.02", "--create-burst", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s.waitPoolReady(t, ctx)
	a := s.create(t, "base") // claimed from the pool
	if hits, err := s.Metric(ctx, `^cubby_pool_claims_total\{.*outcome="hit"`); err != nil || hits != 1 {
		t.Fatalf("pool hits = %v, %v", hits, err)
	}
	s.waitPoolReady(t, ctx)
	s.createRefused(t, s.Key, "limit of 1 live sandboxes") // although a warm sandbox waits
	if err := a.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	b := s.create(t, "base") // the second token of the burst
	if err := b.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	code, e, h := s.call(t, s.Key, "POST", "/v2/sandboxes", map[string]any{"templateID": "base"})
	if code != http.StatusTooManyRequests || e.Code != 429 || !strings.Contains(e.Message, "faster than the limit") || h.Get("Retry-After") == "" {
		t.Fatalf("third create in a row: %d %+v Retry-After %q, want 429", code, e, h.Get("Retry-After"))
	}
	// Another team has its own bucket and count.
	s.createAs(t, s.teamKey(t, "other"))
}

// waitPoolReady waits until the warm pool has a booted sandbox.
func (s *server) waitPoolReady(t *testing.T, ctx context.Context) {
	t.Helper()
	for {
		if v, err := s.Metric(ctx, `^cubby_pool_sandboxes\{.*state="ready"`); err == nil && v >= 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the warm pool never got ready\n%s", s.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestListenerTimeouts: a connection that never sends a request is closed
// after --read-header-timeout, a keep-alive connection left idle after
// --idle-timeout, and a command streaming for longer than both is not cut.
func TestListenerTimeouts(t *testing.T) {
	const header, idle = 2 * time.Second, 3 * time.Second
	s := startServer(t, "--read-header-timeout", header.String(), "--idle-timeout", idle.String())

	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if held := closedAfter(t, c, c); held < header/2 || held > header+2*time.Second {
		t.Errorf("a silent connection was closed after %v, want about %v", held, header)
	}

	k, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	br := bufio.NewReader(k)
	for range 2 { // the connection is kept alive between requests
		if _, err := io.WriteString(k, "GET /health HTTP/1.1\r\nHost: cubby\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("health: %d, close %v", resp.StatusCode, resp.Close)
		}
	}
	if held := closedAfter(t, k, br); held < idle/2 || held > idle+2*time.Second {
		t.Errorf("an idle keep-alive connection was closed after %v, want about %v", held, idle)
	}

	sbx := s.create(t, "base")
	if r := run(t, sbx, "", "sleep 8; echo done"); r.Code != 0 || r.Out != "done\n" {
		t.Fatalf("a command streaming past both timeouts: %+v", r)
	}
}

// closedAfter reads c (through r) until the server closes it and returns how
// long that took (the test fails after a minute).
func closedAfter(t *testing.T, c net.Conn, r io.Reader) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(time.Minute))
	_, err := io.Copy(io.Discard, r)
	held := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for a minute")
	}
	return held
}
