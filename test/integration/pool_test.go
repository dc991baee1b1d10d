package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// metric returns the value of the first sample on the server's GET /metrics
// matching pattern, or -1 (testserver.Server.Metric).
func (s *server) metric(t *testing.T, pattern string) float64 {
	t.Helper()
	v, err := s.Metric(context.Background(), pattern)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sandboxDirs lists the sandbox IDs the backend holds on disk (pooled ones included).
func (s *server) sandboxDirs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.DataDir, "sandboxes"))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	return ids
}

func (s *server) waitPoolReady(t *testing.T, n float64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for s.metric(t, `^cubby_pool_sandboxes\{state="ready"`) != n {
		if time.Now().After(deadline) {
			t.Fatalf("warm pool never reached %v ready sandboxes\n%s", n, s.log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// execute runs code through the code interpreter (POST /execute on port 49999
// via the gateway) and returns the result text and execution count.
func (sb *sandbox) execute(ctx context.Context, t *testing.T, code string) (text string, count int) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"code": code})
	req, _ := http.NewRequestWithContext(ctx, "POST", sb.envdURL("/execute"), strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Transport: &sandboxTransport{id: sb.ID, token: sb.Token, port: "49999"}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("execute: %d %s", resp.StatusCode, b)
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			break
		}
		switch line["type"] {
		case "result":
			text, _ = line["text"].(string)
		case "number_of_executions":
			count = int(line["execution_count"].(float64))
		case "error":
			t.Fatalf("execute %q: %v", code, line)
		}
	}
	return text, count
}

// TestWarmPool: `--pool code-interpreter=1` keeps one booted sandbox that no
// list shows; a create claims it with its env vars, metadata and access token
// applied, the kernel is fresh (first execution count 1), the pool refills, and
// stopping the server kills the warm sandbox.
func TestWarmPool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbpl", Args: []string{"--pool", "code-interpreter=1"}})
	s := &server{Server: ts, t: t}
	s.waitPoolReady(t, 1)
	pooled := s.sandboxDirs(t)
	if len(pooled) != 1 {
		t.Fatalf("sandbox dirs with one warm sandbox: %v", pooled)
	}
	var list []map[string]any
	if code := s.api("GET", "/v2/sandboxes", nil, &list); code != 200 || len(list) != 0 {
		t.Fatalf("list with only a warm sandbox: %d %v", code, list)
	}
	if code := s.api("GET", "/sandboxes/"+pooled[0], nil, nil); code != 404 {
		t.Fatalf("getInfo of the unclaimed warm sandbox: %d, want 404", code)
	}

	sb := s.create(t, map[string]any{"templateID": "code-interpreter", "envVars": map[string]string{"POOLVAR": "v1"},
		"metadata": map[string]string{"who": "pool-test"}})
	if sb.ID != pooled[0] {
		t.Fatalf("create got %s, want the warm sandbox %s", sb.ID, pooled[0])
	}
	if hits := s.metric(t, `^cubby_pool_claims_total\{outcome="hit"`); hits != 1 {
		t.Fatalf("pool hits = %v, want 1", hits)
	}
	out, code := sb.run(ctx, t, "echo $POOLVAR; hostname; ls -A /home/user | grep -v '^\\.' | wc -l")
	if code != 0 || out != "v1\n"+sb.ID+"\n0\n" {
		t.Fatalf("env/hostname/home in the claimed sandbox: %q (exit %d)", out, code)
	}
	text, count := sb.execute(ctx, t, "import os; os.environ.get('POOLVAR')")
	if text != "v1" || count != 1 { // E2B strips the repr quotes of a str result
		t.Fatalf("first execution in the claimed sandbox: %q count %d, want v1 count 1", text, count)
	}
	unauth := &sandbox{ID: sb.ID, s: s}
	req, _ := http.NewRequestWithContext(ctx, "GET", unauth.envdURL("/envs"), nil)
	resp, err := (&http.Client{Transport: &sandboxTransport{id: sb.ID}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("envd of a claimed secured sandbox without token: %d, want 401", resp.StatusCode)
	}
	var info map[string]any
	if code := s.api("GET", "/sandboxes/"+sb.ID, nil, &info); code != 200 || info["metadata"].(map[string]any)["who"] != "pool-test" {
		t.Fatalf("getInfo of the claimed sandbox: %d %v", code, info)
	}

	// The claim's init is recorded: a filesystem pause restarts the agent, which
	// must come back with the token and the env vars.
	sb.pause(t, map[string]any{"memory": false})
	if code := sb.connect(t, 300); code != 201 {
		t.Fatalf("resume of the claimed sandbox: %d", code)
	}
	if out, code := sb.run(ctx, t, "echo $POOLVAR"); code != 0 || out != "v1\n" {
		t.Fatalf("env after a filesystem pause of the claimed sandbox: %q (exit %d)", out, code)
	}

	// A create without internet access is served warm too, with the
	// restriction applied before it returns.
	s.waitPoolReady(t, 1)
	offline := s.warmID(t, sb.ID)
	nb := s.create(t, map[string]any{"templateID": "code-interpreter", "allow_internet_access": false})
	if nb.ID != offline {
		t.Fatalf("no-internet create got %s, want the warm sandbox %s", nb.ID, offline)
	}
	ip, _ := nb.run(ctx, t, "hostname -I | cut -d' ' -f1")
	addr, err := netip.ParseAddr(strings.TrimSpace(ip))
	if err != nil {
		t.Fatalf("sandbox address %q: %v", ip, err)
	}
	if r := s.resources(t, nb.ID, addr); !r.NoInternet {
		t.Fatalf("warm sandbox claimed without internet access is not blocked: %s", r)
	}
	if code := s.api("DELETE", "/sandboxes/"+nb.ID, nil, nil); code != 204 {
		t.Fatalf("kill: %d", code)
	}
	s.wantGone(t, nb.ID)

	s.waitPoolReady(t, 1) // refilled with a new sandbox
	refill := s.warmID(t, sb.ID)
	// A crash leaves the warm sandbox without a record: the restarted server
	// sweeps it, keeps the claimed one, and boots a new warm one.
	s.Kill9()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	s.wantGone(t, refill)
	if out, code := sb.run(ctx, t, "echo $POOLVAR"); code != 0 || out != "v1\n" {
		t.Fatalf("claimed sandbox after a server crash: %q (exit %d)", out, code)
	}
	s.waitPoolReady(t, 1)
	refill = s.warmID(t, sb.ID)
	s.Stop()
	s.wantGone(t, refill)
	s.wantGone(t, sb.ID)
}

// warmID returns the one sandbox on disk other than claimed (the warm one).
func (s *server) warmID(t *testing.T, claimed string) string {
	t.Helper()
	var warm []string
	for _, id := range s.sandboxDirs(t) {
		if id != claimed {
			warm = append(warm, id)
		}
	}
	if len(warm) != 1 {
		t.Fatalf("want one warm sandbox on disk besides %s, have %v", claimed, warm)
	}
	return warm[0]
}

// TestDefaultContextsFlag: `--default-contexts python --python-preload ""`
// boots code-interpreter sandboxes with only the Python context, whose kernel
// has not imported the data stack; both reach the agent's command line.
func TestDefaultContextsFlag(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbdc", Args: []string{"--default-contexts", "python", "--python-preload", ""}})
	s := &server{Server: ts, t: t}
	sb := s.create(t, map[string]any{"templateID": "code-interpreter"})
	if text, _ := sb.execute(ctx, t, "1 + 1"); text != "2" {
		t.Fatalf("python runCode = %q", text)
	}
	langs := func() []string {
		req, _ := http.NewRequestWithContext(ctx, "GET", sb.envdURL("/contexts"), nil)
		resp, err := (&http.Client{Transport: &sandboxTransport{id: sb.ID, token: sb.Token, port: "49999"}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list []struct{ Language string }
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range list {
			out = append(out, c.Language)
		}
		return out
	}
	// Once the agent is ready every default context has started.
	deadline := time.Now().Add(time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", sb.envdURL("/ready"), nil)
		resp, err := (&http.Client{Transport: &sandboxTransport{id: sb.ID, token: sb.Token}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 204 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent never ready: %d", resp.StatusCode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := langs(); len(got) != 1 || got[0] != "python" {
		t.Fatalf("contexts at boot = %v, want [python]", got)
	}
	out, code := sb.run(ctx, t, "cat /proc/1/cmdline | tr '\\0' ' '")
	if code != 0 || !strings.Contains(out, "--default-contexts=python") || !strings.Contains(out, "--python-preload= ") {
		t.Fatalf("sandbox init command line: %q", out)
	}
	if text, _ := sb.execute(ctx, t, "import sys; 'pandas' in sys.modules"); text != "False" {
		t.Fatalf("pandas preloaded in the kernel despite --python-preload \"\": %q", text)
	}
	if text, _ := sb.execute(ctx, t, "import pandas; pandas.DataFrame({'a': [1, 2]}).a.sum()"); text != "3" {
		t.Fatalf("pandas import on demand: %q", text)
	}
	// What a kernel writes to its own stdout (not the cell's) reaches the
	// sandbox logs as a record naming the kernel and its context.
	sb.execute(ctx, t, "import os; os.system('echo kernel-fd-marker-$((6*7))')")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		logs := s.logs(t, sb.ID)
		i := slices.IndexFunc(logs.LogEntries, func(e logEntry) bool { return e.Message == "kernel-fd-marker-42" })
		if i >= 0 {
			if f := logs.LogEntries[i].Fields; f["source"] != "kernel" || f["kernel"] != "python3" || f["context"] == "" {
				t.Fatalf("kernel log record fields = %v", f)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kernel output never reached GET /logs: %+v", logs.LogEntries)
		}
	}
}
