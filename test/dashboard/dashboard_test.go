package dashboardtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cubby-dev/cubby/sdk"
)

// TestDashboard is issue 13's browser walk-through: log in (a wrong key
// first), see a sandbox created through the SDK appear, open its terminal and
// type `echo hi`, run a cell that draws a chart and see the image, upload a
// file and find it through the SDK, and kill the sandbox from the table.
// Every page is screenshotted on the way.
func TestDashboard(t *testing.T) {
	ctx := browser(t)
	run(t, ctx, "open the dashboard",
		chromedp.Navigate(srv.URL("/dashboard/")),
		chromedp.WaitVisible(css("#key")))
	screenshot(t, ctx, "login")
	run(t, ctx, "log in with a wrong key",
		chromedp.SendKeys(css("#key"), "e2b_"+strings.Repeat("0", 40)),
		chromedp.Submit(css("#key")),
		chromedp.WaitVisible(css("#login-error")))
	msg := value(t, ctx, "read the login error", chromedp.Text(css("#login-error")))
	if !strings.Contains(msg, "not accepted") {
		t.Fatalf("wrong key: %q", msg)
	}
	screenshot(t, ctx, "login-error")
	login(t, ctx)
	loc := value(t, ctx, "overview", chromedp.Location())
	if strings.Contains(loc, srv.Key) || !strings.HasSuffix(loc, "/dashboard/") {
		t.Fatalf("after login the browser is at %s", loc)
	}
	sb := create(t, "code-interpreter", map[string]string{"owner": "dashboard-test"})
	id := sb.ID()
	run(t, ctx, "overview counts the sandbox",
		waitJS(`document.querySelector('[data-field="running"]').textContent.trim() !== '0' &&
			!document.querySelector('[data-field="cpu"]').textContent.includes('measuring')`))
	screenshot(t, ctx, "overview")

	run(t, ctx, "the sandbox appears in the table",
		chromedp.Navigate(srv.URL("/dashboard/sandboxes?metadata=owner%3Ddashboard-test")),
		chromedp.WaitVisible(css(`tr[data-sandbox="`+id+`"]`)))
	screenshot(t, ctx, "sandboxes")

	run(t, ctx, "open the sandbox page",
		chromedp.Click(css(`a[href="/dashboard/sandboxes/`+id+`"]`)),
		chromedp.WaitVisible(css("#term-open")))
	checkTerminal(t, ctx)
	checkCell(t, ctx)
	checkUpload(t, ctx, sb)
	run(t, ctx, "metrics chart and logs show",
		waitJS(`document.querySelectorAll('#chart polyline').length === 2 && document.querySelector('#log-lines').textContent.length > 0`))
	screenshot(t, ctx, "sandbox")

	run(t, ctx, "templates", chromedp.Navigate(srv.URL("/dashboard/templates")),
		chromedp.WaitVisible(css(`a[href^="/dashboard/templates/"]`)))
	screenshot(t, ctx, "templates")
	run(t, ctx, "one template", chromedp.Navigate(srv.URL("/dashboard/templates/code-interpreter")),
		chromedp.WaitVisible(css("#build-log-title")))
	screenshot(t, ctx, "template")

	run(t, ctx, "kill from the table",
		chromedp.Navigate(srv.URL("/dashboard/sandboxes")),
		chromedp.Click(css(`button[value="kill:`+id+`"]`)),
		chromedp.WaitVisible(css(".flash")))
	msg = value(t, ctx, "read the message", chromedp.Text(css(".flash")))
	if !strings.Contains(msg, "Killed sandbox "+id) {
		t.Fatalf("flash after kill: %q", msg)
	}
	if _, err := sdk.GetInfo(context.Background(), id, new(srv.Conn())); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("after the kill from the table, GetInfo = %v", err)
	}
}

// checkTerminal opens the terminal, types `echo hi` and waits for its output.
// The text goes in as Input.insertText (as typed text reaches xterm.js through
// its input event); Enter as a key press.
func checkTerminal(t *testing.T, ctx context.Context) {
	t.Helper()
	run(t, ctx, "open the terminal",
		chromedp.Click(css("#term-open")),
		waitJS(`document.querySelector('#term-status').textContent === 'Connected.'`),
		waitJS(`document.querySelector('#term .xterm-rows') && document.querySelector('#term .xterm-rows').textContent.includes('$')`),
		chromedp.Focus(css("#term .xterm-helper-textarea")),
		typeText("echo hi"),
		chromedp.SendKeys(css("#term .xterm-helper-textarea"), "\r"),
		waitJS(`Array.from(document.querySelectorAll('#term .xterm-rows > div')).some(d => d.textContent.trim() === 'hi')`))
}

// checkCell runs a cell drawing a chart and waits for the PNG.
func checkCell(t *testing.T, ctx context.Context) {
	t.Helper()
	code := "import matplotlib.pyplot as plt\nprint('drawing')\nplt.plot([1, 4, 2, 5])\nplt.title('from the dashboard')\nplt.show()"
	run(t, ctx, "run a chart cell",
		chromedp.SetValue(css("#cell-code"), code),
		chromedp.Click(css("#cell-run")),
		waitJS(`(() => { const i = document.querySelector('#cell-output img');
			return i && i.src.startsWith('data:image/png;base64,') && i.complete && i.naturalWidth > 100; })()`),
		waitJS(`document.querySelector('#cell-output pre.stdout').textContent === 'drawing\n'`),
		waitJS(`document.querySelector('#cell-status').textContent.startsWith('Done')`))
}

// checkUpload uploads a file through the file browser and reads it back
// through the SDK.
func checkUpload(t *testing.T, ctx context.Context, sb *sdk.Sandbox) {
	t.Helper()
	local := filepath.Join(t.TempDir(), "from-browser.txt")
	content := "uploaded through the dashboard " + time.Now().Format(time.RFC3339Nano)
	if err := os.WriteFile(local, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "upload a file",
		waitJS(`document.querySelector('#files-status').textContent.includes('entries in /home/user')`),
		chromedp.SetUploadFiles(css("#upload-files"), []string{local}),
		chromedp.Click(css(`#upload button[type="submit"]`)),
		waitJS(`document.querySelector('#files-status').textContent.startsWith('Uploaded /home/user/from-browser.txt')`),
		waitJS(`Array.from(document.querySelectorAll('#files-table a')).some(a => a.textContent === 'from-browser.txt')`))
	got, err := sb.Files.ReadString(context.Background(), "/home/user/from-browser.txt", nil)
	if err != nil || got != content {
		t.Fatalf("the uploaded file through the SDK: %q, %v", got, err)
	}
}
