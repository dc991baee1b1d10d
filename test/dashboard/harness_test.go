// Package dashboardtest drives Cubby's web dashboard in a real headless
// Chromium (Debian's chromium, through chromedp) against one real server
// (CUBBY_BIN) with real sandboxes, and checks its protections over plain
// HTTP. The test run writes a screenshot of each page into
// CUBBY_SCREENSHOTS_DIR (default <repo>/.cache/dashboard-screenshots).
package dashboardtest

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// srv is the server every test of the package uses (started by TestMain).
var srv *testserver.Server

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, testserver.Options{BridgePrefix: "cbdash"}, &srv))
}

// create makes a sandbox of template with metadata md through the SDK (a
// 10-minute sandbox timeout) and kills it when the test ends.
func create(t testing.TB, template string, md map[string]string) *sdk.Sandbox {
	t.Helper()
	return srv.Create(t, &sdk.CreateOptions{Template: template, Metadata: md, Timeout: 10 * time.Minute})
}

// browser starts a headless Chromium with a fresh profile for the test.
func browser(t testing.TB) context.Context {
	t.Helper()
	bin := os.Getenv("CUBBY_CHROMIUM")
	if bin == "" {
		bin = "chromium"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("no %s: install Debian's chromium (scripts/install-deps.sh --test) or set CUBBY_CHROMIUM", bin)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("no-default-browser-check", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs browser actions with a timeout, failing the test with step.
func run(t testing.TB, ctx context.Context, step string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	value(t, ctx, step, chromedp.Steps(actions...))
}

// value runs one browser action returning a value, failing the test with step.
func value[T any](t testing.TB, ctx context.Context, step string, a chromedp.Action[T]) T {
	t.Helper()
	tctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	v, err := chromedp.Run(tctx, a)
	if err != nil {
		body, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
		t.Fatalf("%s: %v\npage text:\n%s", step, err, body)
	}
	return v
}

// waitJS polls a JavaScript expression until it is true.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(100*time.Millisecond))
}

// css is a CSS selector.
func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// screenshotDir is where the page screenshots go.
func screenshotDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("CUBBY_SCREENSHOTS_DIR")
	if dir == "" {
		root, err := testserver.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, ".cache", "dashboard-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// screenshot saves a full-page PNG (quality 100: PNG, not JPEG) of the current page as <name>.png.
func screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	p := filepath.Join(screenshotDir(t), name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", p)
}

// login logs the browser in with the server's key.
func login(t testing.TB, ctx context.Context) {
	t.Helper()
	run(t, ctx, "log in",
		chromedp.Navigate(srv.URL("/dashboard/login")),
		chromedp.SendKeys(css("#key"), srv.Key),
		chromedp.Submit(css("#key")),
		chromedp.WaitVisible(css("#overview")))
}

// httpLogin logs a plain HTTP client in and returns it (cookies kept) and
// the session's CSRF token.
func httpLogin(t testing.TB, key string) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.PostForm(srv.URL("/dashboard/login"), url.Values{"key": {key}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	_, token := csrfOf(t, c)
	return c, token
}

// get fetches a dashboard path and returns the body (any status).
func get(t testing.TB, c *http.Client, path string) string {
	t.Helper()
	resp, err := c.Get(srv.URL(path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// typeText inserts text at the focused element as the keyboard's text input
// does (Input.insertText).
func typeText(s string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, input.InsertText, input.InsertTextParams{Text: s})
		return err
	})
}
