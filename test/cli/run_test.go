package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pngMagic starts every PNG file.
var pngMagic = []byte("\x89PNG\r\n\x1a\n")

const chartCode = `import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [4, 1, 9])
plt.title("cli test")
plt.show()
print("plotted")
6 * 7
`

// TestRun runs code with `cubby run`: streamed output, the main result,
// a matplotlib chart saved as a real PNG file, an error with traceback and
// exit status 1, code from a file and from stdin, --json, and the created
// sandbox killed afterwards.
func TestRun(t *testing.T) {
	s := need(t)
	if !s.hasTemplate(t, "code-interpreter") {
		t.Skipf("the code-interpreter template is not built in %s; build it with `make templates` "+
			"(or `cubby template build code-interpreter --templates-dir %s`)", s.TemplatesDir, s.TemplatesDir)
	}
	out := t.TempDir()
	// A sandbox created and killed by run itself.
	r := s.cli(t, runOpts{dir: out}, "run", chartCode)
	if r.code != 0 {
		t.Fatalf("run: %s", r)
	}
	chart := "cubby-chart-1.png"
	if !strings.Contains(r.stdout, "plotted\n") || !strings.Contains(r.stdout, chart+"\n") || !strings.HasSuffix(r.stdout, "42\n") {
		t.Errorf("run output: %s", r)
	}
	checkPNG(t, filepath.Join(out, chart))

	// An existing sandbox, kept: state survives between runs.
	id := s.newSandbox(t, "--template", "code-interpreter").SandboxID
	s.ok(t, "run", "--sandbox", id, "x = 20")
	r = s.cli(t, runOpts{}, "run", "--sandbox", id, "--out-dir", out, chartCode+"x + 1\n")
	if r.code != 0 || !strings.Contains(r.stdout, filepath.Join(out, "cubby-chart-2.png")+"\n") || !strings.HasSuffix(r.stdout, "21\n") {
		t.Errorf("second chart must not overwrite the first: %s", r)
	}
	checkPNG(t, filepath.Join(out, "cubby-chart-2.png"))

	// Code from a file; an error prints its traceback and exits 1.
	file := filepath.Join(out, "boom.py")
	if err := os.WriteFile(file, []byte("print('before')\ndef f():\n    return 1 / 0\nf()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = s.cli(t, runOpts{}, "run", "--sandbox", id, file)
	if r.code != 1 || r.stdout != "before\n" || !strings.Contains(r.stderr, "ZeroDivisionError") || !strings.Contains(r.stderr, "f()") {
		t.Errorf("error in a file: %s", r)
	}

	// Code from stdin with --json; the sandbox run created is gone afterwards.
	r = s.cli(t, runOpts{stdin: "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\n3 * 14"}, "run", "--json", "-")
	if r.code != 0 {
		t.Fatalf("run --json -: %s", r)
	}
	got := decode[struct {
		SandboxID string   `json:"sandboxID"`
		Stdout    []string `json:"stdout"`
		Stderr    []string `json:"stderr"`
		Results   []struct {
			Text         string `json:"text"`
			IsMainResult bool   `json:"isMainResult"`
		} `json:"results"`
		Error *struct{ Name string } `json:"error"`
	}](t, r.stdout)
	if strings.Join(got.Stdout, "") != "to out\n" || strings.Join(got.Stderr, "") != "to err\n" || got.Error != nil ||
		len(got.Results) != 1 || got.Results[0].Text != "42" || !got.Results[0].IsMainResult {
		t.Errorf("run --json: %+v", got)
	}
	if r := s.cli(t, runOpts{}, "sandbox", "info", got.SandboxID); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("the sandbox run created was not killed: %s", r)
	}

	r = s.cli(t, runOpts{}, "run", "--sandbox", id, "--lang", "bash", "echo from-$((1+1))")
	if r.code != 0 || r.stdout != "from-2\n" {
		t.Errorf("--lang bash: %s", r)
	}
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("chart file: %v", err)
	}
	if !bytes.HasPrefix(b, pngMagic) || len(b) < 1000 {
		t.Errorf("%s is not a real PNG chart (%d bytes, starts %q)", path, len(b), b[:min(len(b), 8)])
	}
}
