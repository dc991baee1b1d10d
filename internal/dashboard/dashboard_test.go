package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cubby-dev/cubby/internal/apikey"
	"github.com/cubby-dev/cubby/sdk"
)

func TestSessionsExpire(t *testing.T) {
	s := newSessions(time.Hour, 3*time.Hour)
	now := time.Unix(1000, 0)
	s.now = func() time.Time { return now }
	sess := s.create("k")
	req := func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/dashboard/", nil)
		r.AddCookie(&http.Cookie{Name: cookieName, Value: sess.id})
		return r
	}
	for _, step := range []time.Duration{59 * time.Minute, 59 * time.Minute, 59 * time.Minute} {
		now = now.Add(step)
		if s.get(req()) == nil {
			t.Fatalf("session gone %s after login while used every 59 minutes", now.Sub(time.Unix(1000, 0)))
		}
	}
	now = now.Add(59 * time.Minute) // 3h56m after login: past the maximum
	if s.get(req()) != nil {
		t.Fatal("session alive past its maximum age")
	}
	sess = s.create("k")
	now = now.Add(61 * time.Minute)
	if s.get(req()) != nil {
		t.Fatal("session alive after an hour idle")
	}
	if !sess.validCSRF(sess.csrf) || sess.validCSRF("") || sess.validCSRF(sess.csrf+"x") {
		t.Fatal("CSRF comparison")
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{
		"/dashboard/sandboxes?state=paused": "/dashboard/sandboxes?state=paused",
		"":                                  "/dashboard/",
		"https://evil.example/":             "/dashboard/",
		"//evil.example/dashboard/":         "/dashboard/",
		"/dashboard/\\evil":                 "/dashboard/",
		"/other":                            "/dashboard/",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseMetadata(t *testing.T) {
	md, err := parseMetadata(" a=1, b = two words ,c=")
	if err != nil || len(md) != 3 || md["a"] != "1" || md["b"] != "two words" || md["c"] != "" {
		t.Fatalf("parseMetadata = %v, %v", md, err)
	}
	if _, err := parseMetadata("novalue"); err == nil {
		t.Fatal("a pair without = was accepted")
	}
}

// TestCreateMedian feeds a real histogram (the buckets telemetry uses) and
// checks the interpolated median.
func TestCreateMedian(t *testing.T) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cubby_sandbox_create_duration_seconds",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 15)}, []string{"template", "outcome"})
	for _, v := range []float64{0.012, 0.015, 0.018, 0.030} {
		h.WithLabelValues("a", "ok").Observe(v)
	}
	h.WithLabelValues("b", "ok").Observe(0.3)
	h.WithLabelValues("b", "error").Observe(50)
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := createFrom(fams[0])
	// 5 ok samples; the median (2.5th) lies in the (10 ms, 20 ms] bucket,
	// which holds 3 samples after 0: 10 + 10*2.5/3 ms.
	if got.Count != 5 || got.P50ms < 18.3 || got.P50ms > 18.4 {
		t.Fatalf("createFrom = %+v, want 5 creates and a median of 18.3 ms", got)
	}
	if empty := createFrom(&dto.MetricFamily{}); empty.Count != 0 || empty.P50ms != 0 {
		t.Fatalf("no samples: %+v", empty)
	}
}

// fakeAPI answers the control-plane calls the template page makes.
func fakeAPI(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-KEY") != "good" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"code":401,"message":"invalid API key"}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v2/sandboxes":
			_, _ = io.WriteString(w, `[]`)
		case "/templates":
			_, _ = io.WriteString(w, `[{"templateID":"t1","buildID":"b1","aliases":["mine"],"names":["mine"],"cpuCount":2,"memoryMB":512,
				"diskSizeMB":1024,"public":true,"createdAt":"2024-01-02T03:04:05Z","updatedAt":"2024-01-02T03:04:05Z","envdVersion":"0.6.13","buildStatus":"ready"}]`)
		case "/templates/t1/builds/b1/status":
			_, _ = io.WriteString(w, `{"templateID":"t1","buildID":"b1","status":"ready","logs":["a"],"logEntries":[
				{"timestamp":"2024-01-02T03:04:05Z","level":"info","message":"[1/3] installing <packages>"},
				{"timestamp":"2024-01-02T03:04:06Z","level":"warn","message":"careful"}]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestPagesRender logs in against a fake API and renders the pages that do
// not need a sandbox: the template page shows the build log (escaped).
func TestPagesRender(t *testing.T) {
	api := fakeAPI(t)
	conn := sdk.ConnectionOptions{APIURL: api.URL, SandboxURL: api.URL}
	d, err := New(Config{Connection: conn, Check: apikey.NewChecker(conn, 0).Check, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(srv.URL+"/dashboard/login", url.Values{"key": {"bad"}})
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bad key: %v %v", resp, err)
	}
	resp, err = c.PostForm(srv.URL+"/dashboard/login", url.Values{"key": {"good"}})
	if err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("good key: %v %v", resp, err)
	}
	cookie := resp.Cookies()[0]
	page := func(path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.AddCookie(cookie)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		return resp.StatusCode, string(b)
	}
	code, body := page("/dashboard/templates/mine")
	if code != 200 || !strings.Contains(body, "[1/3] installing &lt;packages&gt;") || !strings.Contains(body, `class="lvl-warn"`) {
		t.Fatalf("template page: %d\n%s", code, body)
	}
	if code, body := page("/dashboard/templates/none"); code != 404 || !strings.Contains(body, "There is no template none.") {
		t.Fatalf("unknown template: %d", code)
	}
	if code, body := page("/dashboard/"); code != 200 || !strings.Contains(body, `data-field="running">0<`) {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	if code, _ := page("/dashboard/nope"); code != 404 {
		t.Fatalf("unknown page: %d", code)
	}
}

// TestAssets serves the embedded files with hashed, long-cached URLs and gzip.
func TestAssets(t *testing.T) {
	as, err := loadAssets()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"app.js", "app.css", "vendor/xterm/xterm.js", "vendor/xterm/xterm.css", "vendor/addon-fit/addon-fit.js"} {
		u := as.URL(name)
		r := httptest.NewRequest(http.MethodGet, u, nil)
		r.Header.Set("Accept-Encoding", "gzip")
		w := httptest.NewRecorder()
		as.ServeHTTP(w, r)
		if w.Code != 200 || w.Header().Get("Content-Encoding") != "gzip" || !strings.Contains(w.Header().Get("Cache-Control"), "immutable") {
			t.Errorf("%s: %d %v", u, w.Code, w.Header())
		}
	}
	w := httptest.NewRecorder()
	as.ServeHTTP(w, httptest.NewRequest(http.MethodGet, Prefix+"/static/../dashboard.go", nil))
	if w.Code != http.StatusNotFound {
		t.Fatalf("path outside the static files: %d", w.Code)
	}
}

func TestNewNeedsCheck(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a key check succeeded")
	}
}
