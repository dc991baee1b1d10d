package interpreter

import (
	"os/exec"
	"testing"

	"github.com/cubby-dev/cubby/internal/agent/jupyter"
)

func TestNormalizeLanguage(t *testing.T) {
	for in, want := range map[string]string{"": "python", " Python ": "python", "JS": "javascript",
		"ts": "typescript", "R": "r", "bash": "bash", "Java": "java", "deno": "deno", "julia-1.9": "julia-1.9"} {
		if got := NormalizeLanguage(in); got != want {
			t.Errorf("NormalizeLanguage(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAnsiQuote(t *testing.T) {
	got := ansiQuote("a'b\\c\n\x00\x7fé")
	want := `$'a\'b\\c\x0a\x7fé'`
	if got != want {
		t.Fatalf("ansiQuote = %s, want %s", got, want)
	}
}

// TestDeno needs Deno (host: npm i -g deno); the "deno" language is its own.
func TestDeno(t *testing.T) {
	if _, err := exec.LookPath("deno"); err != nil {
		t.Skip("deno not installed (npm i -g deno)")
	}
	cwd := t.TempDir()
	_, base := newService(t, func(c *Config) {
		c.DefaultLanguages = []string{LangDeno}
		c.Workdir = cwd
	})
	x := runCode(t, base, map[string]any{"language": "deno", "code": "Deno.cwd()"})
	if len(x.results) != 1 || x.results[0]["text"] != cwd || x.count != 1 {
		t.Fatalf("deno cwd: %v", x.lines)
	}
	x = runCode(t, base, map[string]any{"language": "Deno", "code": "Deno.env.get('REQ')",
		"env_vars": map[string]string{"REQ": "v\"1"}})
	if len(x.results) != 1 || x.results[0]["text"] != `v\"1` && x.results[0]["text"] != `v"1` {
		t.Fatalf("deno env_vars: %v", x.lines)
	}
	x = runCode(t, base, map[string]any{"language": "deno", "code": "String(Deno.env.get('REQ'))"})
	if len(x.results) != 1 || x.results[0]["text"] != "undefined" {
		t.Fatalf("deno env restore: %v", x.lines)
	}
	x = runCode(t, base, map[string]any{"language": "deno", "code": "const n: number = 21; console.log('log'); n * 2"})
	if len(x.results) != 1 || x.results[0]["text"] != "42" || x.stdout != "log\n" {
		t.Fatalf("deno typescript: %v", x.lines)
	}
	x = runCode(t, base, map[string]any{"language": "deno", "code": "throw new Error('bad')"})
	if x.err == nil {
		t.Fatalf("deno error: %v", x.lines)
	}
}

// TestR needs IRkernel (host: apt-get install r-cran-irkernel).
func TestR(t *testing.T) {
	if _, err := jupyter.LookupKernelSpec(jupyter.KernelSpecDirs("", ""), "ir"); err != nil {
		t.Skip("IRkernel not installed")
	}
	_, base := newService(t, func(c *Config) { c.DefaultLanguages = []string{LangR} })
	x := runCode(t, base, map[string]any{"language": "r", "code": "1 + 1"})
	if len(x.results) != 1 || x.results[0]["text"] != "[1] 2" {
		t.Fatalf("r: %v", x.lines)
	}
	x = runCode(t, base, map[string]any{"language": "R", "code": "cat(Sys.getenv('REQ'))",
		"env_vars": map[string]string{"REQ": "r\\v"}})
	if x.stdout != "r\\v" {
		t.Fatalf("r env_vars: %v", x.lines)
	}
	x = runCode(t, base, map[string]any{"language": "r", "code": "cat(Sys.getenv('REQ', unset = 'unset'), exists('.cubby_saved_env'))"})
	if x.stdout != "unset FALSE" {
		t.Fatalf("r env restore: %v", x.lines)
	}
	x = runCode(t, base, map[string]any{"language": "r", "code": "stop('bad')"})
	if x.err == nil {
		t.Fatalf("r error: %v", x.lines)
	}
}
