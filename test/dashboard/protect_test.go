package dashboardtest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/cubby-dev/cubby/sdk"
)

// noRedirect is a client that shows redirects instead of following them.
func noRedirect(jar http.CookieJar) *http.Client {
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// TestLoginAndSession: pages need a session (else the login page), API calls
// answer 401; a wrong key is refused with an error; the session cookie is
// HttpOnly and SameSite=Strict; the key is in no URL, page or log line; after
// logout the old cookie is a dead session (back to the login page).
func TestLoginAndSession(t *testing.T) {
	c := noRedirect(nil)
	resp := must(c.Get(srv.URL("/dashboard/sandboxes")))
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/login?next=%2Fdashboard%2Fsandboxes" {
		t.Fatalf("page without a session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if resp := must(c.Get(srv.URL("/dashboard/api/overview"))); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("API without a session: %d", resp.StatusCode)
	}
	resp = must(c.PostForm(srv.URL("/dashboard/login"), url.Values{"key": {"e2b_" + strings.Repeat("1", 40)}}))
	if body := read(resp); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "not accepted") || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong key: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	jar, _ := cookiejar.New(nil)
	c = noRedirect(jar)
	resp = must(c.PostForm(srv.URL("/dashboard/login"), url.Values{"key": {srv.Key}, "next": {"https://evil.example/"}}))
	read(resp)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/dashboard/" {
		t.Fatalf("login: %d to %q (an outside next must not be followed)", resp.StatusCode, resp.Header.Get("Location"))
	}
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "cubby_dashboard" {
			cookie = ck
		}
	}
	if cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/dashboard/" ||
		strings.Contains(cookie.Value, srv.Key) {
		t.Fatalf("session cookie %+v", cookie)
	}
	for _, p := range []string{"/dashboard/", "/dashboard/sandboxes", "/dashboard/templates"} {
		if body := get(t, c, p); strings.Contains(body, srv.Key) || !strings.Contains(body, "csrf-token") {
			t.Fatalf("%s: the page holds the key, or no CSRF token", p)
		}
	}
	forged := noRedirect(nil)
	req, _ := http.NewRequest(http.MethodGet, srv.URL("/dashboard/"), nil)
	req.AddCookie(&http.Cookie{Name: "cubby_dashboard", Value: "forged"})
	if resp := must(forged.Do(req)); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("forged cookie: %d", resp.StatusCode)
	}

	_, token := csrfOf(t, c)
	resp = must(c.PostForm(srv.URL("/dashboard/logout"), url.Values{"csrf": {token}}))
	read(resp)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	stale := noRedirect(nil)
	req, _ = http.NewRequest(http.MethodGet, srv.URL("/dashboard/"), nil)
	req.AddCookie(cookie)
	if resp := must(stale.Do(req)); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/dashboard/login") {
		t.Fatalf("the cookie of an ended session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if log, err := os.ReadFile(srv.LogPath); err != nil || strings.Contains(string(log), srv.Key) {
		t.Fatalf("the server log holds the key (or cannot be read: %v)", err)
	}
}

// TestCSRF: a state-changing request needs the session's CSRF token and must
// come from the dashboard's own origin.
func TestCSRF(t *testing.T) {
	sb := create(t, "base", nil)
	c, token := httpLogin(t, srv.Key)
	post := func(form url.Values, hdr map[string]string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL("/dashboard/sandboxes/actions"), strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp := must(c.Do(req))
		read(resp)
		return resp.StatusCode
	}
	extend := url.Values{"do": {"extend:" + sb.ID()}, "minutes": {"60"}}
	if code := post(extend, nil); code != http.StatusForbidden {
		t.Fatalf("no token: %d", code)
	}
	extend.Set("csrf", "wrong")
	if code := post(extend, nil); code != http.StatusForbidden {
		t.Fatalf("wrong token: %d", code)
	}
	extend.Set("csrf", token)
	for _, hdr := range []map[string]string{{"Sec-Fetch-Site": "cross-site"}, {"Origin": "https://evil.example"}} {
		if code := post(extend, hdr); code != http.StatusForbidden {
			t.Fatalf("cross-origin %v: %d", hdr, code)
		}
	}
	if code := post(extend, nil); code != http.StatusSeeOther {
		t.Fatalf("good request: %d", code)
	}
	info, err := sb.GetInfo(context.Background())
	if err != nil || time.Until(info.EndAt) < 50*time.Minute {
		t.Fatalf("the extend did not happen: %+v %v", info, err)
	}
}

// TestTerminalSandboxDies: a terminal whose sandbox is killed says so and
// closes; a handshake from another origin is refused.
func TestTerminalSandboxDies(t *testing.T) {
	sb := create(t, "base", nil)
	c, _ := httpLogin(t, srv.Key)
	wsURL := "ws://" + srv.Addr + "/dashboard/sandboxes/" + sb.ID() + "/terminal?cols=100&rows=30"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: c,
		HTTPHeader: http.Header{"Origin": {"https://evil.example"}}}); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin handshake: %v %v", err, resp)
	}
	ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: c, HTTPHeader: http.Header{"Origin": {"http://" + srv.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	in, _ := json.Marshal(map[string]string{"type": "input", "data": "echo ready-$((40+2))\r"})
	if err := ws.Write(ctx, websocket.MessageText, in); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "ready-42") {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("before the kill: %v; output %q", err, out.String())
		}
		if typ == websocket.MessageBinary {
			out.Write(b)
		}
	}
	if err := sdk.Kill(ctx, sb.ID(), new(srv.Conn())); err != nil {
		t.Fatal(err)
	}
	var exit string
	for {
		typ, b, err := ws.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Fatalf("closed with %v (exit message %q)", err, exit)
			}
			break
		}
		if typ == websocket.MessageText {
			var m map[string]string
			_ = json.Unmarshal(b, &m)
			exit = m["message"]
		}
	}
	if !strings.Contains(exit, "killed") {
		t.Fatalf("exit message %q: want it to say the sandbox was killed", exit)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the terminal did not close")
	}
}

func must(resp *http.Response, err error) *http.Response {
	if err != nil {
		panic(err)
	}
	return resp
}

func read(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// csrfOf returns the CSRF token on the overview page of a logged-in client.
func csrfOf(t testing.TB, c *http.Client) (string, string) {
	t.Helper()
	page := get(t, c, "/dashboard/")
	const marker = `name="csrf-token" content="`
	i := strings.Index(page, marker)
	if i < 0 {
		t.Fatal("no CSRF token")
	}
	rest := page[i+len(marker):]
	return page, rest[:strings.IndexByte(rest, '"')]
}

// TestOtherTeam: logged in with another team's key, the dashboard neither
// shows nor touches the default team's sandbox.
func TestOtherTeam(t *testing.T) {
	sb := create(t, "base", nil)
	key := srv.TeamKey(t, "dash-other")
	c, token := httpLogin(t, key)
	resp := must(c.Get(srv.URL("/dashboard/sandboxes/" + sb.ID())))
	if read(resp); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another team's sandbox page: %d", resp.StatusCode)
	}
	resp = must(c.Get(srv.URL("/dashboard/api/sandboxes/" + sb.ID() + "/files")))
	if read(resp); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("another team's files: %d", resp.StatusCode)
	}
	if page := get(t, c, "/dashboard/sandboxes"); strings.Contains(page, sb.ID()) {
		t.Fatal("another team's table lists the sandbox")
	}
	resp = must(c.PostForm(srv.URL("/dashboard/sandboxes/actions"), url.Values{"csrf": {token}, "do": {"kill:" + sb.ID()}}))
	read(resp)
	if page := get(t, c, resp.Header.Get("Location")); !strings.Contains(page, "Failed: "+sb.ID()) {
		t.Fatal("killing another team's sandbox did not fail")
	}
	if info, err := sb.GetInfo(context.Background()); err != nil || info.State != sdk.StateRunning {
		t.Fatalf("the sandbox after another team's kill: %v %v", info, err)
	}
}
