package node_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"testing"

	"github.com/cubby-dev/cubby/internal/agent/kernels/node"
	"github.com/cubby-dev/cubby/internal/template"
)

// TestTemplateInstallsKernel checks that the code-interpreter template installs
// every file of the kernel under node.InstallDir and its kernelspec, from this
// package.
func TestTemplateInstallsKernel(t *testing.T) {
	def, ok := template.Builtin("code-interpreter")
	if !ok {
		t.Fatal("built-in template code-interpreter does not load")
	}
	files, err := fs.Glob(node.Files(), "nodekernel/*.js")
	if err != nil || len(files) != 3 {
		t.Fatalf("node.Files() = %v, %v", files, err)
	}
	want := map[string]string{"/usr/local/share/jupyter/kernels/" + node.KernelSpecName + "/kernel.json": node.KernelSpecFile}
	for _, f := range files {
		want[path.Join(node.InstallDir, path.Base(f))] = f
	}
	for dest, src := range want {
		if f, ok := def.Files[dest]; !ok || f.Source != src {
			t.Errorf("template installs %s from %q, want %q", dest, f.Source, src)
		}
	}
}

// TestTransform runs tests/transform.test.js (node:test) with the TypeScript
// compiler the code-interpreter template installs (found under
// CUBBY_TEMPLATES_DIR) or CUBBY_NODE_PATH; it skips when node or the compiler
// is missing.
func TestTransform(t *testing.T) {
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed")
	}
	modules := os.Getenv("CUBBY_NODE_PATH")
	if modules == "" {
		tdir := os.Getenv("CUBBY_TEMPLATES_DIR")
		if tdir == "" {
			t.Skip("set CUBBY_TEMPLATES_DIR (a built code-interpreter template) or CUBBY_NODE_PATH (node_modules with typescript)")
		}
		m, err := template.NewManager(tdir, nil)
		if err != nil {
			t.Fatal(err)
		}
		info, err := m.Get("code-interpreter")
		if err != nil {
			t.Skipf("code-interpreter template not built in %s: %v", tdir, err)
		}
		modules = filepath.Join(info.RootfsDir, "usr/local/lib/node_modules")
	}
	if _, err := os.Stat(filepath.Join(modules, "typescript")); err != nil {
		t.Skipf("no typescript in %s", modules)
	}
	cmd := exec.Command(nodeBin, "--test", "tests/")
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
