package interpreter

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cubby-dev/cubby/internal/agent/kernels/python"
)

// kernelPid returns the pid of a Python context's kernel.
func kernelPid(t *testing.T, s *Service, id string) int {
	t.Helper()
	c := s.lookup(id)
	if c == nil {
		t.Fatalf("no context %s", id)
	}
	return c.eng.(*kernelEngine).k.Pid()
}

// parentPid reads pid's parent from /proc.
func parentPid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatalf("stat of %d: %v", pid, err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

func defaultID(s *Service, language string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.defaults[language].ID
}

func TestPythonContextsForkFromServer(t *testing.T) {
	havePython(t)
	s, base := newService(t, nil)
	srv := s.fork.current()
	if srv == nil {
		t.Fatal("StartDefaults did not start the fork server")
	}
	if ppid := parentPid(t, kernelPid(t, s, defaultID(s, LangPython))); ppid != srv.Pid() {
		t.Fatalf("default context kernel parent %d, want fork server %d", ppid, srv.Pid())
	}
	c := createContext(t, base, map[string]any{"language": "python"})
	if ppid := parentPid(t, kernelPid(t, s, c.ID)); ppid != srv.Pid() {
		t.Fatalf("new context kernel parent %d, want fork server %d", ppid, srv.Pid())
	}
	in := func(code string) map[string]any { return map[string]any{"context_id": c.ID, "code": code} }
	runCode(t, base, in("x = 1"))
	if x := runCode(t, base, in("x += 1; x")); len(x.results) != 1 || x.results[0]["text"] != "2" || x.count != 2 {
		t.Fatalf("x += 1: %v", x.lines)
	}
	resp := post(t, context.Background(), base+"/contexts/"+c.ID+"/restart", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		t.Fatalf("restart: %d", resp.StatusCode)
	}
	if ppid := parentPid(t, kernelPid(t, s, c.ID)); ppid != srv.Pid() {
		t.Fatalf("restarted kernel parent %d, want fork server %d", ppid, srv.Pid())
	}
	if x := runCode(t, base, in("'x' in globals()")); len(x.results) != 1 || x.results[0]["text"] != "False" {
		t.Fatalf("state after restart: %v", x.lines)
	}
}

func TestForkServerDeathFallsBackCold(t *testing.T) {
	havePython(t)
	s, base := newService(t, func(c *Config) { c.ZygotePreload = []string{} })
	srv := s.fork.current()
	if err := syscall.Kill(srv.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-srv.Done()
	// Within the retry interval: cold start.
	c := createContext(t, base, map[string]any{"language": "python"})
	if ppid := parentPid(t, kernelPid(t, s, c.ID)); ppid != os.Getpid() {
		t.Fatalf("kernel parent %d, want this process %d (cold)", ppid, os.Getpid())
	}
	if x := runCode(t, base, map[string]any{"context_id": c.ID, "code": "1 + 1"}); len(x.results) != 1 || x.results[0]["text"] != "2" {
		t.Fatalf("cold context: %v", x.lines)
	}
	// Past it: a new server starts and kernels fork again.
	s.fork.mu.Lock()
	s.fork.retry = 0
	s.fork.mu.Unlock()
	c = createContext(t, base, map[string]any{"language": "python"})
	next := s.fork.current()
	if next == nil || next.Pid() == srv.Pid() {
		t.Fatal("no new fork server")
	}
	if ppid := parentPid(t, kernelPid(t, s, c.ID)); ppid != next.Pid() {
		t.Fatalf("kernel parent %d, want new fork server %d", ppid, next.Pid())
	}
}

func TestNoZygoteStartsCold(t *testing.T) {
	havePython(t)
	s, _ := newService(t, func(c *Config) { c.NoZygote = true })
	if s.fork != nil {
		t.Fatal("fork server configured despite NoZygote")
	}
	if ppid := parentPid(t, kernelPid(t, s, defaultID(s, LangPython))); ppid != os.Getpid() {
		t.Fatalf("kernel parent %d, want this process %d", ppid, os.Getpid())
	}
}

// TestChartsFromPreloadedStack checks that a kernel forked from a server that
// preloaded matplotlib.pyplot and the display extension (EagerPreload) still
// gets inline figures (flushed at the end of the cell) with e2b/chart data.
func TestChartsFromPreloadedStack(t *testing.T) {
	havePython(t)
	dir := t.TempDir()
	if err := python.Install(dir); err != nil {
		t.Fatal(err)
	}
	s, base := newService(t, func(c *Config) { c.PythonPath, c.ZygotePreload, c.EagerPreload = []string{dir}, nil, true })
	info := s.fork.current().Info()
	if !slices.Contains(info.Preloaded, "matplotlib.pyplot") {
		t.Skipf("matplotlib not installed: %v", info.Failed)
	}
	if !slices.Contains(info.Preloaded, python.ModuleName) {
		t.Fatalf("extension not preloaded: %+v", info)
	}
	x := runCode(t, base, code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.title('t')\nNone"))
	if len(x.results) != 1 || x.results[0]["png"] == nil || x.results[0]["chart"] == nil {
		t.Fatalf("figure results: %v", x.lines)
	}
}

// TestDataStackPreloadedAfterDefault checks the default (late) preload: the
// fork server forks the default Python context before importing the data
// stack; once StartDefaults has returned, the still unused default context has
// been re-forked with it loaded, as are new contexts, and figures work. A used
// context is never re-forked.
func TestDataStackPreloadedAfterDefault(t *testing.T) {
	havePython(t)
	dir := t.TempDir()
	if err := python.Install(dir); err != nil {
		t.Fatal(err)
	}
	s, base := newService(t, func(c *Config) { c.PythonPath, c.ZygotePreload = []string{dir}, []string{"matplotlib.pyplot"} })
	if info := s.fork.current().Info(); slices.Contains(info.Preloaded, "matplotlib.pyplot") ||
		!slices.Contains(info.Preloaded, python.ModuleName) {
		t.Fatalf("fork server ready report %+v: want only the extension before the first fork", info)
	}
	loaded := "import os, sys; ('matplotlib.pyplot' in sys.modules, os.getppid())"
	want := fmt.Sprintf("(True, %d)", s.fork.current().Pid())
	c := createContext(t, base, map[string]any{"language": "python"})
	if x := runCode(t, base, map[string]any{"context_id": c.ID, "code": loaded}); len(x.results) != 1 || x.results[0]["text"] != want {
		t.Skipf("matplotlib not installed? new context: %v, want %s", x.lines, want)
	}
	if x := runCode(t, base, code(loaded)); len(x.results) != 1 || x.results[0]["text"] != want {
		t.Fatalf("unused default context not re-forked after the late preload: %v, want %s", x.lines, want)
	}
	plot := "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.title('t')\nNone"
	for _, in := range []map[string]any{code(plot), {"context_id": c.ID, "code": plot}} {
		if x := runCode(t, base, in); len(x.results) != 1 || x.results[0]["png"] == nil || x.results[0]["chart"] == nil {
			t.Fatalf("figure results in %v: %v", in["context_id"], x.lines)
		}
	}
	pid := kernelPid(t, s, defaultID(s, LangPython))
	runCode(t, base, code("kept = 7"))
	s.refork(context.Background(), LangPython)
	if got := kernelPid(t, s, defaultID(s, LangPython)); got != pid {
		t.Fatalf("used default context re-forked: kernel %d, was %d", got, pid)
	}
	if x := runCode(t, base, code("kept")); len(x.results) != 1 || x.results[0]["text"] != "7" {
		t.Fatalf("state lost: %v", x.lines)
	}
}
