package java_test

import (
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/agent/kernels/java"
	"github.com/cubby-dev/cubby/internal/template"
)

// TestTemplateInstallsKernel checks that the code-interpreter template installs
// the launcher (compiled into java.InstallDir) and the kernelspec from this
// package, and fetches the kernel jar to java.KernelJar.
func TestTemplateInstallsKernel(t *testing.T) {
	def, ok := template.Builtin("code-interpreter")
	if !ok {
		t.Fatal("built-in template code-interpreter does not load")
	}
	for dest, src := range map[string]string{
		"/usr/local/share/jupyter/kernels/java/kernel.json": "javakernel/kernel.json",
		java.InstallDir + "/CubbyJavaKernel.java":           "javakernel/CubbyJavaKernel.java",
	} {
		if f, ok := def.Files[dest]; !ok || f.Source != src {
			t.Errorf("template installs %s from %q, want %q", dest, f.Source, src)
		}
	}
	compiled, fetched := false, false
	for _, r := range def.Run {
		compiled = compiled || strings.Contains(r, "javac") && strings.Contains(r, java.InstallDir)
		fetched = fetched || strings.Contains(r, "-o "+java.KernelJar) && strings.Contains(r, "sha256sum -c")
	}
	if !compiled || !fetched {
		t.Errorf("template run steps: launcher compiled %v, kernel jar fetched and checked %v", compiled, fetched)
	}
}
