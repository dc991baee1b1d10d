package python

import (
	"bytes"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/cubby-dev/cubby/internal/template"
)

var update = flag.Bool("update", false, "rewrite the code-interpreter template's copies of the extension")

// Where the code-interpreter template installs the files (Debian bookworm's python3.11).
const (
	templateName     = "code-interpreter"
	templateDir      = "../../template/builtin/" + templateName
	sitePackages     = "/usr/local/lib/python3.11/dist-packages"
	kernelConfigDest = "/etc/ipython/" + KernelConfigName
)

func moduleFiles(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(Files(), ModuleName+"/*.py")
	if err != nil || len(files) == 0 {
		t.Fatalf("Files() has no %s/*.py: %v", ModuleName, err)
	}
	return files
}

func TestInstall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "py")
	if err := Install(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range moduleFiles(t) {
		want, _ := fs.ReadFile(Files(), f)
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("installed %s differs (err %v)", f, err)
		}
	}
	if err := Install(dir); err != nil { // overwrite is fine
		t.Fatalf("second Install: %v", err)
	}
	if err := Install("/proc/nonexistent/x"); err == nil {
		t.Error("Install into /proc succeeded")
	}
	if !bytes.Contains(KernelConfig(), []byte(`"`+ModuleName+`"`)) {
		t.Errorf("KernelConfig does not load %s:\n%s", ModuleName, KernelConfig())
	}
}

// TestTemplateCopies checks that the code-interpreter template installs exactly
// this package's files (the template can only embed files below its own
// directory, so it carries copies). With -update it rewrites the copies.
func TestTemplateCopies(t *testing.T) {
	want := map[string][]byte{kernelConfigDest: KernelConfig()}
	for _, f := range moduleFiles(t) {
		want[path.Join(sitePackages, f)], _ = fs.ReadFile(Files(), f)
	}
	// Read the file map without validation: with -update the sources may not exist yet.
	var def struct{ Files map[string]template.File }
	data, err := os.ReadFile(filepath.Join(templateDir, template.DefinitionFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &def); err != nil {
		t.Fatal(err)
	}
	for dest, content := range want {
		f, ok := def.Files[dest]
		if !ok || f.Source == "" {
			t.Errorf("template %s does not install %s from a source file", templateName, dest)
			continue
		}
		src := filepath.Join(templateDir, filepath.FromSlash(f.Source))
		if *update {
			if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(src, content, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(src)
		if err != nil || !bytes.Equal(got, content) {
			t.Errorf("%s is out of date (err %v); run go test ./internal/interpreter/python -run TestTemplateCopies -update", src, err)
		}
	}
	if _, err := template.LoadDefinition(templateDir); err != nil {
		t.Errorf("template %s: %v", templateName, err)
	}
	for dest := range def.Files {
		if strings.HasPrefix(dest, sitePackages+"/"+ModuleName+"/") && want[dest] == nil {
			t.Errorf("template installs %s, which is not part of %s", dest, ModuleName)
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
