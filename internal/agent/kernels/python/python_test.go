package python_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/agent/kernels/python"
	"github.com/cubby-dev/cubby/internal/template"
)

// Where the code-interpreter template installs the files (Debian bookworm's python3.11).
const (
	templateName     = "code-interpreter"
	sitePackages     = "/usr/local/lib/python3.11/dist-packages"
	kernelConfigDest = "/etc/ipython/" + python.KernelConfigName
)

func moduleFiles(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(python.Files(), python.ModuleName+"/*.py")
	if err != nil || len(files) == 0 {
		t.Fatalf("python.Files() has no %s/*.py: %v", python.ModuleName, err)
	}
	return files
}

func TestInstall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "py")
	if err := python.Install(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range moduleFiles(t) {
		want, _ := fs.ReadFile(python.Files(), f)
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("installed %s differs (err %v)", f, err)
		}
	}
	if err := python.Install(dir); err != nil { // overwrite is fine
		t.Fatalf("second Install: %v", err)
	}
	if err := python.Install("/proc/nonexistent/x"); err == nil {
		t.Error("Install into /proc succeeded")
	}
	if !bytes.Contains(python.KernelConfig(), []byte(`"`+python.ModuleName+`"`)) {
		t.Errorf("KernelConfig does not load %s:\n%s", python.ModuleName, python.KernelConfig())
	}
}

// TestTemplateInstallsPackage checks that the code-interpreter template installs
// every file of the extension and the kernel configuration, from this package.
func TestTemplateInstallsPackage(t *testing.T) {
	def, ok := template.Builtin(templateName)
	if !ok {
		t.Fatalf("built-in template %s does not load", templateName)
	}
	want := map[string]string{kernelConfigDest: python.KernelConfigName}
	for _, f := range moduleFiles(t) {
		want[path.Join(sitePackages, f)] = f
	}
	for dest, src := range want {
		f, ok := def.Files[dest]
		if !ok || f.Source != src {
			t.Errorf("template %s installs %s from %q, want %q", templateName, dest, f.Source, src)
		}
	}
	for dest := range def.Files {
		if strings.HasPrefix(dest, sitePackages+"/"+python.ModuleName+"/") && want[dest] == "" {
			t.Errorf("template installs %s, which is not part of %s", dest, python.ModuleName)
		}
	}
}

// debianPython is the interpreter the tests use: Debian's, which sees the
// python3-* packages (a pyenv python3 first on PATH does not).
const debianPython = "/usr/bin/python3"

// TestPytest runs the Python test suite in tests/ (real IPython shells and a
// real ipykernel). It skips only when pytest, IPython or matplotlib are missing.
func TestPytest(t *testing.T) {
	probe := exec.Command(debianPython, "-c", "import pytest, IPython, matplotlib")
	if out, err := probe.CombinedOutput(); err != nil {
		t.Skipf("%s lacks pytest/IPython/matplotlib (apt-get install python3-pytest python3-ipykernel python3-matplotlib): %v\n%s", debianPython, err, out)
	}
	cmd := exec.Command(debianPython, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=.")
	cmd.Env = withoutEnv(cmd.Env, "MPLBACKEND")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest failed: %v\n%s", err, out)
	}
	t.Logf("pytest:\n%s", lastLines(string(out), 5))
}

func withoutEnv(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
