package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

func TestParseLocation(t *testing.T) {
	for in, want := range map[string]location{
		"abc123:/tmp/x":   {Sandbox: "abc123", Path: "/tmp/x"},
		"abc123:rel/x":    {Sandbox: "abc123", Path: "rel/x"},
		"abc123:":         {Sandbox: "abc123", Path: ""},
		"/tmp/a:b":        {Path: "/tmp/a:b"},
		"./abc:def":       {Path: "./abc:def"},
		"ABC:/x":          {Path: "ABC:/x"},
		"local.txt":       {Path: "local.txt"},
		"-":               {Path: "-"},
		"sb-with-dash:/x": {Path: "sb-with-dash:/x"},
	} {
		if got := parseLocation(in); got != want {
			t.Errorf("parseLocation(%q) = %+v, want %+v", in, got, want)
		}
	}
}

// TestCommandLineWithBash runs the quoted command lines through a real bash
// and checks each word arrives intact.
func TestCommandLineWithBash(t *testing.T) {
	words := []string{"printf", "[%s]\n", "a b", "c'd", `$HOME`, "`x`", `"q"`, "", "tab\there", "*", "semi;colon", "ok_-./=:,+@%"}
	out, err := exec.Command("bash", "-c", commandLine(words)).Output()
	if err != nil {
		t.Fatalf("bash -c %q: %v", commandLine(words), err)
	}
	var want strings.Builder
	for _, w := range words[2:] {
		fmt.Fprintf(&want, "[%s]\n", w)
	}
	if string(out) != want.String() {
		t.Errorf("bash printed %q, want %q", out, want.String())
	}
	if got := commandLine([]string{"echo $HOME | wc -c"}); got != "echo $HOME | wc -c" {
		t.Errorf("a single argument must stay a shell line: %q", got)
	}
}

func TestParsePairs(t *testing.T) {
	got, err := parsePairs("env", []string{"A=1", "B=x=y", "C="})
	if err != nil || len(got) != 3 || got["A"] != "1" || got["B"] != "x=y" || got["C"] != "" {
		t.Errorf("parsePairs = %v, %v", got, err)
	}
	if _, err := parsePairs("env", []string{"novalue"}); err == nil || !strings.Contains(err.Error(), "--env") {
		t.Errorf("parsePairs without '=': %v", err)
	}
	if _, err := parsePairs("metadata", []string{"=v"}); err == nil {
		t.Error("parsePairs with an empty key: no error")
	}
	if m, err := parsePairs("env", nil); m != nil || err != nil {
		t.Errorf("parsePairs(nil) = %v, %v", m, err)
	}
}

func TestRenderProgress(t *testing.T) {
	got := renderProgress("up", 3<<20/2, 3<<20, time.Second)
	want := "up [===============>              ]  50%  1.5 MiB / 3.0 MiB  1.5 MiB/s"
	if got != want {
		t.Errorf("renderProgress half:\n got %q\nwant %q", got, want)
	}
	if got := renderProgress("up", 3<<20, 3<<20, 0); !strings.Contains(got, "[==============================] 100%  3.0 MiB / 3.0 MiB") {
		t.Errorf("renderProgress done: %q", got)
	}
	if got := renderProgress("in", 2048, -1, 2*time.Second); got != "in  2.0 KiB  1.0 KiB/s" {
		t.Errorf("renderProgress unknown size: %q", got)
	}
}

func TestProgressCounts(t *testing.T) {
	var out strings.Builder
	p := newProgress(&out, "x", 10)
	r := p.Reader(strings.NewReader("0123456789"))
	buf := make([]byte, 4)
	for {
		if _, err := r.Read(buf); err != nil {
			break
		}
	}
	p.Done()
	if !strings.Contains(out.String(), "100%  10 B / 10 B") || !strings.HasSuffix(out.String(), "\n") {
		t.Errorf("progress output %q", out.String())
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestExplain(t *testing.T) {
	const url = "http://127.0.0.1:3000"
	cases := []struct {
		err     error
		haveKey bool
		want    string
	}{
		{&sdk.AuthenticationError{Message: "no API key: set E2B_API_KEY"}, false, "set E2B_API_KEY or pass --api-key"},
		{&sdk.AuthenticationError{Message: "list: invalid key; check the API key (E2B_API_KEY)"}, true, "server at " + url + " rejected the API key"},
		{&sdk.AuthenticationError{Message: "start: unknown user nobody2"}, true, "unknown user nobody2"},
		{&sdk.ConnectionError{URL: url, Err: syscall.ECONNREFUSED}, true, "is cubby serve running at " + url},
		{&sdk.NotFoundError{Resource: sdk.ResourceSandbox, ID: "abc"}, true, "sandbox abc not found"},
		{&sdk.NotFoundError{Resource: sdk.ResourceFile, ID: "/x"}, true, "/x: no such file"},
		{&sdk.TimeoutError{Message: "gone", Err: sdk.ErrSandboxKilled}, true, "killed or reached its end of life"},
		{&sdk.TimeoutError{Message: "slow", Err: context.DeadlineExceeded}, true, "slow; pass a longer --timeout"},
		{&sdk.APIError{StatusCode: 501, Message: "pause unsupported"}, true, "does not support this: pause unsupported"},
		{errors.New("plain"), true, "plain"},
	}
	for _, c := range cases {
		if got := explain(c.err, url, c.haveKey); !strings.Contains(got.Error(), c.want) {
			t.Errorf("explain(%v) = %q, want it to contain %q", c.err, got, c.want)
		}
	}
	var ee exitError
	if err := explain(fmt.Errorf("run: %w", context.Canceled), url, true); !errors.As(err, &ee) || ee.code != 130 {
		t.Errorf("explain(canceled) = %v, want exit status 130", err)
	}
}

func TestConnectionOptions(t *testing.T) {
	for _, k := range []string{"E2B_API_KEY", "E2B_API_URL", "E2B_SANDBOX_URL", "E2B_DOMAIN"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	c := &clientFlags{}
	if o := c.options(); o.APIURL != defaultServerURL || o.SandboxURL != defaultServerURL || o.APIKey != "" {
		t.Errorf("defaults: %+v", o)
	}
	t.Setenv("E2B_API_URL", "http://h:1")
	t.Setenv("E2B_API_KEY", "k")
	if o := c.options(); o.APIURL != "http://h:1" || o.SandboxURL != "http://h:1" || o.APIKey != "k" {
		t.Errorf("from the environment: %+v", o)
	}
	c = &clientFlags{apiURL: "http://flag:2", apiKey: "fk", sandboxURL: "http://sb:3"}
	if o := c.options(); o.APIURL != "http://flag:2" || o.SandboxURL != "http://sb:3" || o.APIKey != "fk" {
		t.Errorf("flags win: %+v", o)
	}
	os.Unsetenv("E2B_API_URL")
	t.Setenv("E2B_DOMAIN", "e2b.app")
	c = &clientFlags{}
	if o := c.options(); o.APIURL != "" || o.SandboxURL != "" || c.serverURL() != "https://api.e2b.app" {
		t.Errorf("with E2B_DOMAIN the SDK defaults apply: %+v", o)
	}
}

func TestReadCode(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "x.JS")
	if err := os.WriteFile(f, []byte("1+1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, lang, err := readCode(f, nil); code != "1+1" || lang != "javascript" || err != nil {
		t.Errorf("readCode(file) = %q, %q, %v", code, lang, err)
	}
	if code, lang, err := readCode("-", strings.NewReader("print(1)")); code != "print(1)" || lang != "" || err != nil {
		t.Errorf("readCode(-) = %q, %q, %v", code, lang, err)
	}
	if code, _, _ := readCode("print('not a file')", nil); code != "print('not a file')" {
		t.Errorf("readCode(code) = %q", code)
	}
}

// TestSavePNG checks charts get the next free name and never overwrite.
func TestSavePNG(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "cubby-chart-1.png"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := &runPrinter{out: &strings.Builder{}, errOut: &strings.Builder{}, outDir: dir}
	p.result(sdk.Result{PNG: "iVBORw0KGgo=", Text: "<Figure>"}) // base64 of the PNG signature
	p.result(sdk.Result{PNG: "iVBORw0KGgo="})
	if p.err != nil {
		t.Fatal(p.err)
	}
	if old, _ := os.ReadFile(filepath.Join(dir, "cubby-chart-1.png")); string(old) != "old" {
		t.Error("an existing chart was overwritten")
	}
	for _, n := range []string{"cubby-chart-2.png", "cubby-chart-3.png"} {
		if b, err := os.ReadFile(filepath.Join(dir, n)); err != nil || string(b) != "\x89PNG\r\n\x1a\n" {
			t.Errorf("%s: %q, %v", n, b, err)
		}
	}
	want := filepath.Join(dir, "cubby-chart-2.png") + "\n" + filepath.Join(dir, "cubby-chart-3.png") + "\n"
	if got := p.out.(*strings.Builder).String(); got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
}

// TestRetiredAgentFlags: the agent still parses the command line earlier
// servers gave sandboxes they created (a filesystem-paused one boots with it
// again), while serve no longer has --interpreter-auth.
func TestRetiredAgentFlags(t *testing.T) {
	if err := newAgentCmd().ParseFlags([]string{"--interpreter-auth=all", "--default-contexts=python"}); err != nil {
		t.Fatalf("agent with an earlier server's flags: %v", err)
	}
	if f := newAgentCmd().Flags().Lookup("interpreter-auth"); f == nil || !f.Hidden {
		t.Fatalf("--interpreter-auth of agent = %+v, want a hidden flag", f)
	}
	if err := newServeCmd().ParseFlags([]string{"--interpreter-auth=all"}); err == nil {
		t.Fatal("serve accepted --interpreter-auth")
	}
}
