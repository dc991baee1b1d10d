package zygote

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/jupyter"
)

// plantModule writes dir/<name>.py with body and returns dir (a PYTHONPATH entry).
func plantModule(t *testing.T, name, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name+".py"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLatePreloadAfterFirstFork checks Config.Late: nothing is imported before
// PreloadLate, so a kernel forked first imports the module itself; PreloadLate
// reports the import and kernels forked afterwards start with it loaded.
func TestLatePreloadAfterFirstFork(t *testing.T) {
	dir := plantModule(t, "cubby_late_probe", "import os\nLOADED_BY = os.getpid()\n")
	env := []string{"PATH=/usr/bin:/bin", "PYTHONPATH=" + dir}
	s := startServer(t, func(c *Config) {
		c.Preload, c.Late, c.Env = []string{}, []string{"cubby_late_probe", "cubby_no_such_module"}, env
	})
	if _, ok := s.Info().ImportMs["ipykernel.kernelapp"]; !ok {
		t.Fatalf("ready report has no ipykernel import time: %+v", s.Info())
	}
	withEnv := func(o *jupyter.Options) { o.Env = env }
	first := startKernel(t, s, withEnv)
	if _, res, _ := run(t, first, "import sys; 'cubby_late_probe' in sys.modules"); res != "False" {
		t.Fatalf("late module imported before PreloadLate: %s", res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ms, err := s.PreloadLate(ctx)
	if err != nil {
		t.Fatalf("PreloadLate: %v", err)
	}
	if _, ok := ms["cubby_late_probe"]; !ok {
		t.Fatalf("PreloadLate timings %v lack the module", ms)
	}
	if _, err := s.PreloadLate(ctx); err != nil { // a second call only waits
		t.Fatalf("second PreloadLate: %v", err)
	}
	later := startKernel(t, s, withEnv)
	requireForked(t, later, s)
	code := "import os, cubby_late_probe; cubby_late_probe.LOADED_BY == os.getppid()"
	if _, res, _ := run(t, later, code); res != "True" {
		t.Fatalf("kernel forked after PreloadLate: module loaded by the server = %s", res)
	}
	if _, res, _ := run(t, first, code); res != "False" {
		t.Fatalf("first kernel: module imported by itself = %s, want False", res)
	}
}

// TestExcludeKeepsModuleOutOfIpykernel checks Config.Exclude with debugpy,
// which ipykernel imports when it can: forked kernels run without it (no
// debugger in kernel_info) yet can import it; the shared server, with no
// exclusions, has it loaded.
func TestExcludeKeepsModuleOutOfIpykernel(t *testing.T) {
	probe := "import sys; 'debugpy' in sys.modules"
	if _, res, _ := run(t, startKernel(t, shared(t), nil), probe); res != "True" {
		t.Skipf("ipykernel does not import debugpy here (%s)", res)
	}
	s := startServer(t, func(c *Config) { c.Preload, c.Exclude = []string{}, DefaultExclude() })
	k := startKernel(t, s, nil)
	requireForked(t, k, s)
	if _, res, _ := run(t, k, probe); res != "False" {
		t.Fatalf("debugpy loaded in a kernel of a server excluding it: %s", res)
	}
	if r, res, _ := run(t, k, "import debugpy; 'debugpy' in sys.modules"); r.Status != "ok" || res != "True" {
		t.Fatalf("import debugpy in the kernel: %+v %q", r, res)
	}
	if _, res, _ := run(t, k, "import IPython; get_ipython().Completer.use_jedi"); !strings.Contains(res, "False") {
		t.Fatalf("jedi completion on although jedi was excluded: %s", res)
	}
}
