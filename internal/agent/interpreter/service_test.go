package interpreter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/jupyter"
	"github.com/cubby-dev/cubby/internal/agent/users"
	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

// execution is an /execute response parsed the way the SDKs do: split on "\n",
// JSON-parse every non-empty line.
type execution struct {
	status  int
	body    string
	lines   []map[string]any
	results []map[string]any
	stdout  string
	stderr  string
	err     map[string]any
	errors  int
	count   int
}

func parseStream(t testing.TB, r io.Reader, onLine func(map[string]any)) *execution {
	t.Helper()
	x := &execution{status: 200}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		x.lines = append(x.lines, l)
		switch l["type"] {
		case "result":
			x.results = append(x.results, l)
		case "stdout":
			x.stdout += l["text"].(string)
			if l["timestamp"] == nil {
				t.Errorf("stdout line without timestamp: %v", l)
			}
		case "stderr":
			x.stderr += l["text"].(string)
		case "error":
			x.errors++
			if x.err == nil {
				x.err = l
			}
		case "number_of_executions":
			x.count = int(l["execution_count"].(float64))
		}
		if onLine != nil {
			onLine(l)
		}
	}
	return x
}

// post sends a JSON body and returns the response.
func post(t testing.TB, ctx context.Context, url string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return resp
}

func runCode(t testing.TB, base string, body map[string]any) *execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp := post(t, ctx, base+"/execute", body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return &execution{status: resp.StatusCode, body: string(b)}
	}
	x := parseStream(t, resp.Body, nil)
	if n := len(x.lines); n == 0 || x.lines[n-1]["type"] != "end_of_execution" {
		t.Fatalf("stream did not end with end_of_execution: %v", x.lines)
	}
	if x.errors > 1 {
		t.Fatalf("%d error lines, want at most 1: %v", x.errors, x.lines)
	}
	return x
}

func code(c string) map[string]any { return map[string]any{"code": c} }

func havePython(t testing.TB) {
	t.Helper()
	if _, err := jupyter.LookupKernelSpec(jupyter.KernelSpecDirs("", ""), "python3"); err != nil {
		t.Skip("ipykernel not installed (apt-get install python3-ipykernel)")
	}
}

// newService starts a service (python default only unless langs given) behind
// httptest and closes both at the end of the test.
func newService(t testing.TB, mod func(*Config)) (*Service, string) {
	t.Helper()
	// A bare fork server keeps the suite fast; tests of the preloaded data
	// stack set ZygotePreload back to nil (the default).
	cfg := Config{DefaultLanguages: []string{LangPython}, Workdir: t.TempDir(), RuntimeDir: t.TempDir(),
		InterruptGrace: 10 * time.Second, ZygotePreload: []string{}}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := s.StartDefaults(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		s.Close()
	})
	return s, srv.URL
}

var (
	sharedOnce sync.Once
	sharedURL  string
	sharedEnv  = &envBox{m: map[string]string{"SBX_VAR": "sandbox"}}
)

type envBox struct {
	mu sync.Mutex
	m  map[string]string
}

func (e *envBox) get() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]string{}
	for k, v := range e.m {
		out[k] = v
	}
	return out
}

func (e *envBox) set(k, v string) {
	e.mu.Lock()
	e.m[k] = v
	e.mu.Unlock()
}

// shared returns one python service reused by tests that do not depend on
// fresh state.
func shared(t *testing.T) string {
	t.Helper()
	havePython(t)
	sharedOnce.Do(func() {
		cfg := Config{DefaultLanguages: []string{LangPython, LangBash}, Env: sharedEnv.get,
			Workdir: os.TempDir(), InterruptGrace: 10 * time.Second}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.StartDefaults(context.Background()); err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s.Handler())
		sharedURL = srv.URL
		sharedClose = func() { srv.CloseClientConnections(); srv.Close(); s.Close() }
	})
	if sharedURL == "" {
		t.Fatal("shared service failed to start")
	}
	return sharedURL
}

var sharedClose = func() {}

func TestMain(m *testing.M) {
	code := m.Run()
	sharedClose()
	os.Exit(code)
}

func TestExecutionCountsAndResult(t *testing.T) {
	havePython(t)
	_, base := newService(t, nil)
	x1 := runCode(t, base, code("x = 1"))
	x2 := runCode(t, base, code("x += 1; x"))
	if x1.count != 1 || x2.count != 2 {
		t.Fatalf("counts %d %d, want 1 2", x1.count, x2.count)
	}
	if len(x2.results) != 1 {
		t.Fatalf("results = %v", x2.results)
	}
	r := x2.results[0]
	if r["text"] != "2" || r["is_main_result"] != true || fmt.Sprint(r["extra"]) != "map[]" {
		t.Fatalf("result = %v", r)
	}
	if x2.lines[0]["type"] != "number_of_executions" {
		t.Fatalf("first line = %v", x2.lines[0])
	}
}

func TestStreamsErrorsAndResults(t *testing.T) {
	base := shared(t)
	x := runCode(t, base, code("import sys\nprint('a'); print('b', file=sys.stderr); print('c')"))
	if x.stdout != "a\nc\n" || x.stderr != "b\n" || x.err != nil {
		t.Fatalf("stdout %q stderr %q err %v", x.stdout, x.stderr, x.err)
	}
	x = runCode(t, base, code("print('before')\nraise ValueError('boom')"))
	if x.err == nil || x.err["name"] != "ValueError" || x.err["value"] != "boom" ||
		!strings.Contains(x.err["traceback"].(string), "ValueError") || x.stdout != "before\n" {
		t.Fatalf("error = %v stdout %q", x.err, x.stdout)
	}
	x = runCode(t, base, code("import os\nos.getcwd()"))
	if len(x.results) != 1 || x.results[0]["text"] != os.TempDir() {
		t.Fatalf("quoted text not stripped: %v", x.results)
	}
	disp := "from IPython.display import display\n" +
		"display({'text/latex': r'$x$'}, raw=True)\n" +
		"display({'application/json': {'a': [1, 2]}, 'application/x-custom': 'c', 'text/plain': 'p'}, raw=True)\n" +
		"display({'image/png': 'iVBO', 'text/html': '<b>h</b>'}, raw=True)"
	x = runCode(t, base, code(disp))
	if len(x.results) != 3 {
		t.Fatalf("results = %v", x.results)
	}
	latex, js, img := x.results[0], x.results[1], x.results[2]
	if len(latex) != 4 || latex["latex"] != "$x$" || fmt.Sprint(latex["extra"]) != "map[]" || latex["is_main_result"] != false {
		t.Fatalf("latex-only result = %v", latex)
	}
	if fmt.Sprint(js["json"]) != "map[a:[1 2]]" || fmt.Sprint(js["extra"]) != "map[application/x-custom:c]" ||
		js["application/x-custom"] != nil || js["text"] != "p" {
		t.Fatalf("json result = %v", js)
	}
	if img["png"] != "iVBO" || img["html"] != "<b>h</b>" {
		t.Fatalf("image result = %v", img)
	}
}

func TestInputErrorsInsteadOfHanging(t *testing.T) {
	base := shared(t)
	x := runCode(t, base, code("input('name? ')"))
	if x.err == nil || x.err["name"] != "StdinNotImplementedError" {
		t.Fatalf("error = %v", x.err)
	}
}

func TestEnvVars(t *testing.T) {
	base := shared(t)
	get := "import os; print(os.environ.get('SBX_VAR'), os.environ.get('REQ_VAR'))"
	x := runCode(t, base, map[string]any{"code": get, "env_vars": map[string]string{"REQ_VAR": "r1", "SBX_VAR": "override"}})
	if x.stdout != "override r1\n" {
		t.Fatalf("with env_vars: %q %v", x.stdout, x.err)
	}
	if x = runCode(t, base, code(get)); x.stdout != "sandbox None\n" {
		t.Fatalf("after restore: %q", x.stdout)
	}
	// A sandbox env var that appears later (e.g. after /init) reaches the kernel.
	sharedEnv.set("SBX_LATE", "late")
	if x = runCode(t, base, code("import os; print(os.environ.get('SBX_LATE'))")); x.stdout != "late\n" {
		t.Fatalf("late sandbox env: %q", x.stdout)
	}
	// Bash gets the same treatment.
	bash := map[string]any{"code": "echo \"$SBX_VAR ${REQ_VAR-unset}\"", "language": "bash",
		"env_vars": map[string]string{"REQ_VAR": "it's"}}
	if x = runCode(t, base, bash); x.stdout != "sandbox it's\n" {
		t.Fatalf("bash env_vars: %q %v", x.stdout, x.err)
	}
	delete(bash, "env_vars")
	if x = runCode(t, base, bash); x.stdout != "sandbox unset\n" {
		t.Fatalf("bash after restore: %q", x.stdout)
	}
	if x = runCode(t, base, map[string]any{"code": "1", "env_vars": map[string]string{"A=B": "x"}}); x.status != 400 {
		t.Fatalf("invalid env name: status %d", x.status)
	}
}

func TestLargeOutputThroughHTTP(t *testing.T) {
	base := shared(t)
	x := runCode(t, base, code("import sys; sys.stdout.write('y' * 10_000_000); None"))
	if len(x.stdout) != 10_000_000 || strings.Trim(x.stdout, "y") != "" {
		t.Fatalf("stdout length %d", len(x.stdout))
	}
}

func TestRequestErrors(t *testing.T) {
	base := shared(t)
	x := runCode(t, base, map[string]any{"code": "1", "context_id": "abc", "language": "python"})
	if x.status != 400 {
		t.Fatalf("both: status %d", x.status)
	}
	x = runCode(t, base, map[string]any{"code": "1", "context_id": "nope"})
	if x.status != 404 || x.body != "Context nope not found" {
		t.Fatalf("unknown context: %d %q", x.status, x.body)
	}
	x = runCode(t, base, map[string]any{"code": "1", "language": "cobol"})
	if x.status != 400 || !strings.Contains(x.body, "unsupported language \"cobol\"") {
		t.Fatalf("unknown language: %d %q", x.status, x.body)
	}
	// Python SDK style: every key present, nulls for the absent ones.
	x = runCode(t, base, map[string]any{"code": "40+2", "context_id": nil, "language": nil, "env_vars": nil})
	if len(x.results) != 1 || x.results[0]["text"] != "42" {
		t.Fatalf("null keys: %v", x.lines)
	}
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `"OK"` {
		t.Fatalf("health %d %q", resp.StatusCode, b)
	}
}

func TestDisconnectInterrupts(t *testing.T) {
	base := shared(t)
	c := createContext(t, base, map[string]any{"language": "python"})
	ctx, cancel := context.WithCancel(context.Background())
	resp := post(t, ctx, base+"/execute", map[string]any{"context_id": c.ID,
		"code": "import time\nprint('sleeping', flush=True)\ntime.sleep(100)"})
	parseStream(t, resp.Body, func(l map[string]any) {
		if l["type"] == "stdout" {
			cancel() // the client gives up, as on the SDK's timeoutMs
		}
	})
	resp.Body.Close()
	// The next cell runs at once instead of queueing behind the sleep.
	x := runCode(t, base, map[string]any{"context_id": c.ID, "code": "1 + 1"})
	if len(x.results) != 1 || x.results[0]["text"] != "2" {
		t.Fatalf("after disconnect: %v", x.lines)
	}
}

func TestTimeoutAndKernelDeath(t *testing.T) {
	havePython(t)
	_, base := newService(t, func(c *Config) {
		c.ExecutionTimeout = 2 * time.Second
		c.DefaultLanguages = []string{LangPython, LangBash}
	})
	runCode(t, base, code("kept = 'yes'"))
	x := runCode(t, base, code("import time\ntime.sleep(100)"))
	if x.err == nil || x.err["name"] != ErrNameTimeout {
		t.Fatalf("timeout error = %v", x.err)
	}
	if x = runCode(t, base, code("kept")); len(x.results) != 1 || x.results[0]["text"] != "yes" {
		t.Fatalf("state after timeout: %v", x.lines)
	}
	x = runCode(t, base, code("import os\nos._exit(1)"))
	if x.err == nil || x.err["name"] != ErrNameKernelDied {
		t.Fatalf("death error = %v", x.lines)
	}
	x = runCode(t, base, code("'kept' in globals()"))
	if len(x.results) != 1 || x.results[0]["text"] != "False" || x.count != 1 {
		t.Fatalf("after death: %v", x.lines)
	}
	// Bash: a timed-out command is interrupted, the shell and its state survive.
	runCode(t, base, map[string]any{"language": "bash", "code": "keep=1"})
	x = runCode(t, base, map[string]any{"language": "bash", "code": "sleep 100; echo after"})
	if x.err == nil || x.err["name"] != ErrNameTimeout || strings.Contains(x.stdout, "after") {
		t.Fatalf("bash timeout: %v", x.lines)
	}
	if x = runCode(t, base, map[string]any{"language": "bash", "code": "echo $keep"}); x.stdout != "1\n" {
		t.Fatalf("bash state after timeout: %v", x.lines)
	}
	x = runCode(t, base, map[string]any{"language": "bash", "code": "exit 3"})
	if x.err == nil || x.err["name"] != ErrNameKernelDied {
		t.Fatalf("bash exit: %v", x.lines)
	}
	if x = runCode(t, base, map[string]any{"language": "bash", "code": "echo ${keep-gone}"}); x.stdout != "gone\n" {
		t.Fatalf("bash after death: %v", x.lines)
	}
}

func TestKeepaliveLines(t *testing.T) {
	havePython(t)
	_, base := newService(t, func(c *Config) {
		c.KeepaliveInterval = 100 * time.Millisecond
		c.DefaultLanguages = []string{LangBash}
	})
	x := runCode(t, base, map[string]any{"language": "bash", "code": "sleep 1; echo done"})
	n := 0
	for _, l := range x.lines {
		if l["type"] == "keepalive" {
			n++
		}
	}
	if n == 0 || x.stdout != "done\n" {
		t.Fatalf("no keepalive lines: %v", x.lines)
	}
}

func createContext(t testing.TB, base string, body map[string]any) execapi.Context {
	t.Helper()
	resp := post(t, context.Background(), base+"/contexts", body)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("create context: %d %s", resp.StatusCode, b)
	}
	var c execapi.Context
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("create context body %q: %v", b, err)
	}
	return c
}

func listContexts(t testing.TB, base string) []execapi.Context {
	t.Helper()
	resp, err := http.Get(base + "/contexts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []execapi.Context
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func do(t testing.TB, method, url string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestContextsCRUD(t *testing.T) {
	havePython(t)
	_, base := newService(t, nil)
	cwd := t.TempDir()
	c := createContext(t, base, map[string]any{"language": "Python ", "cwd": cwd})
	if c.Language != "python" || c.Cwd != cwd || c.ID == "" {
		t.Fatalf("context = %+v", c)
	}
	x := runCode(t, base, map[string]any{"context_id": c.ID, "code": "import os\nv = 7\nos.getcwd()"})
	if len(x.results) != 1 || x.results[0]["text"] != cwd {
		t.Fatalf("cwd: %v", x.lines)
	}
	// Running by language twice uses the one default context; listing shows it once.
	runCode(t, base, map[string]any{"language": "python", "code": "1"})
	list := listContexts(t, base)
	if len(list) != 2 || list[0].Language != "python" || list[1].ID != c.ID {
		t.Fatalf("list = %+v", list)
	}
	if st, _ := do(t, http.MethodPost, base+"/contexts/"+c.ID+"/restart"); st != 200 {
		t.Fatalf("restart status %d", st)
	}
	x = runCode(t, base, map[string]any{"context_id": c.ID, "code": "v"})
	if x.err == nil || x.err["name"] != "NameError" {
		t.Fatalf("after restart: %v", x.lines)
	}
	if st, _ := do(t, http.MethodDelete, base+"/contexts/"+c.ID); st != 200 {
		t.Fatalf("delete status %d", st)
	}
	if list = listContexts(t, base); len(list) != 1 || list[0].ID == c.ID {
		t.Fatalf("list after delete = %+v", list)
	}
	if x = runCode(t, base, map[string]any{"context_id": c.ID, "code": "1"}); x.status != 404 {
		t.Fatalf("execute on deleted: %d", x.status)
	}
	for _, m := range []string{http.MethodDelete, http.MethodPost} {
		u := base + "/contexts/nope"
		if m == http.MethodPost {
			u += "/restart"
		}
		if st, body := do(t, m, u); st != 404 || body != "Context nope not found" {
			t.Fatalf("%s unknown: %d %q", m, st, body)
		}
	}
	resp := post(t, context.Background(), base+"/contexts", map[string]any{"language": "python", "cwd": "/no/such/dir"})
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("bad cwd: %d", resp.StatusCode)
	}
}

func TestDeleteAndRestartMidRun(t *testing.T) {
	base := shared(t)
	for _, op := range []string{"restart", "delete"} {
		c := createContext(t, base, map[string]any{"language": "python"})
		resp := post(t, context.Background(), base+"/execute", map[string]any{"context_id": c.ID,
			"code": "import time\nprint('running', flush=True)\ntime.sleep(100)"})
		x := parseStream(t, resp.Body, func(l map[string]any) {
			if l["type"] != "stdout" {
				return
			}
			method, u := http.MethodDelete, base+"/contexts/"+c.ID
			if op == "restart" {
				method, u = http.MethodPost, u+"/restart"
			}
			go func() {
				req, _ := http.NewRequest(method, u, nil)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		})
		resp.Body.Close()
		want := map[string]string{"restart": ErrNameRestarting, "delete": ErrNameDeleted}[op]
		if x.err == nil || x.err["name"] != want || x.lines[len(x.lines)-1]["type"] != "end_of_execution" {
			t.Fatalf("%s mid-run: %v", op, x.lines)
		}
	}
}

func TestConcurrentExecutionsQueue(t *testing.T) {
	base := shared(t)
	c := createContext(t, base, map[string]any{"language": "python"})
	var wg sync.WaitGroup
	counts := make([]int, 4)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := runCode(t, base, map[string]any{"context_id": c.ID, "code": "import time; time.sleep(0.05)"})
			counts[i] = x.count
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for _, n := range counts {
		seen[n] = true
	}
	if len(seen) != 4 || !seen[1] || !seen[4] {
		t.Fatalf("execution counts = %v", counts)
	}
}

func TestBashContext(t *testing.T) {
	base := shared(t)
	bash := func(c string) *execution { return runCode(t, base, map[string]any{"language": "bash", "code": c}) }
	bash("x=5; cd /; f() { echo \"hi $1\"; }; alias eval=false trap=false unset=false; builtin() { :; }; unset -f builtin")
	x := bash("echo \"$x $(pwd) $(f z)\"")
	if x.stdout != "5 / hi z\n" || x.err != nil {
		t.Fatalf("state: %q %v", x.stdout, x.err)
	}
	x = bash("echo out; echo err >&2; false")
	if x.stdout != "out\n" || x.stderr != "err\n" || x.err == nil || x.err["name"] != ErrNameExit ||
		x.err["value"] != "exit status 1" {
		t.Fatalf("exit status: %v", x.lines)
	}
	if x = bash("read v; echo \"got:$v\""); x.stdout != "got:\n" {
		t.Fatalf("read: %v", x.lines)
	}
	if x = bash("printf 'no newline ✓'"); x.stdout != "no newline ✓" {
		t.Fatalf("partial line: %q", x.stdout)
	}
	if x = bash("echo 'quotes \" and \\ and !'\necho line2"); x.stdout != "quotes \" and \\ and !\nline2\n" {
		t.Fatalf("quoting: %q", x.stdout)
	}
	x = bash("head -c 3000000 /dev/zero | tr '\\0' a")
	if len(x.stdout) != 3000000 {
		t.Fatalf("large bash output: %d bytes", len(x.stdout))
	}
	if x.count < 2 {
		t.Fatalf("bash execution count = %d", x.count)
	}
}

func TestPythonExtensionHook(t *testing.T) {
	havePython(t)
	dir := t.TempDir()
	ext := "def load_ipython_extension(ip):\n    ip.user_ns['EXT_LOADED'] = 'yes'\n"
	if err := os.WriteFile(filepath.Join(dir, "cubby_test_ext.py"), []byte(ext), 0o644); err != nil {
		t.Fatal(err)
	}
	_, base := newService(t, func(c *Config) {
		c.PythonExtension = "cubby_test_ext"
		c.PythonPath = []string{dir}
	})
	x := runCode(t, base, code("EXT_LOADED"))
	if len(x.results) != 1 || x.results[0]["text"] != "yes" {
		t.Fatalf("extension not loaded: %v", x.lines)
	}
}

func TestRunsAsConfiguredUser(t *testing.T) {
	havePython(t)
	if os.Getuid() != 0 {
		t.Skip("needs root to switch users")
	}
	lookup := func(name string) (Account, error) {
		u, err := users.Lookup(name)
		if err != nil {
			return Account{}, err
		}
		return Account(*u), nil
	}
	if _, err := lookup("nobody"); err != nil {
		t.Skip("no user nobody")
	}
	work := t.TempDir()
	os.Chmod(filepath.Dir(work), 0o755)
	os.Chmod(work, 0o777)
	_, base := newService(t, func(c *Config) {
		c.User, c.LookupUser = "nobody", lookup
		c.Workdir = work
		c.DefaultLanguages = []string{LangBash}
	})
	x := runCode(t, base, map[string]any{"language": "bash", "code": "echo $(id -un) $(pwd) $USER"})
	if x.stdout != "nobody "+work+" nobody\n" {
		t.Fatalf("bash identity: %v", x.lines)
	}
	x = runCode(t, base, code("import os, pwd\npwd.getpwuid(os.getuid()).pw_name"))
	if len(x.results) != 1 || x.results[0]["text"] != "nobody" {
		t.Fatalf("python identity: %v", x.lines)
	}
}

// TestStartDefaultsPythonFirst checks the start order: the Python context is
// started (and registered) before the other default languages begin, even
// when they are listed first and start faster (bash: milliseconds).
func TestStartDefaultsPythonFirst(t *testing.T) {
	havePython(t)
	s, base := newService(t, func(c *Config) { c.DefaultLanguages = []string{LangBash, LangPython} })
	got := listContexts(t, base)
	if len(got) != 2 || got[0].Language != LangPython || got[1].Language != LangBash {
		t.Fatalf("contexts in creation order %+v, want python then bash", got)
	}
	select {
	case <-s.DefaultsStarted():
	default:
		t.Fatal("DefaultsStarted not closed after StartDefaults returned")
	}
}

// TestUserNeedsLookup: without Config.LookupUser kernels run only as the
// service's own user; naming another fails instead of running as the wrong one.
func TestUserNeedsLookup(t *testing.T) {
	if _, err := New(Config{User: "nobody", DefaultLanguages: []string{}, NoZygote: true}); err == nil {
		t.Fatal("New with a user and no LookupUser succeeded")
	}
}
