// Package testsdk installs the official E2B code-interpreter SDKs, unchanged
// (JS @e2b/code-interpreter with npm ci from js/package-lock.json, Python
// e2b-code-interpreter in python/.venv from python/requirements.txt, the
// versions test/compat pins as its "pinned" set), and runs the scripts next to
// them against a Cubby server, configured only by E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY.
//
// Each script prints a JSON verdict {"ok": true, ...} on its last line and
// exits non-zero on any mismatch. An install is stamped with the sum of the
// files it came from and is redone only when they change; installs are
// serialised with an flock, so test packages running at once share them.
package testsdk

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stampName is the file, inside what an install made, holding the sum of
// the files it was made from.
const stampName = ".cubby-stamp"

// Kit is an installed pair of SDKs.
type Kit struct {
	JSDir  string // js/: package.json, node_modules and the .mjs scripts
	PyDir  string // python/: requirements.txt, .venv and the .py scripts
	Python string // the venv's python
}

// Install installs both SDKs (or finds them installed) and returns where they
// are. It fails t when npm, python3 -m venv or pip fail (they need the npm
// registry and PyPI reachable).
func Install(t testing.TB) Kit {
	t.Helper()
	_, src, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testsdk: no source path")
	}
	dir := filepath.Dir(src)
	k := Kit{JSDir: filepath.Join(dir, "js"), PyDir: filepath.Join(dir, "python")}
	k.Python = filepath.Join(k.PyDir, ".venv", "bin", "python")
	unlock := lock(t, dir)
	defer unlock()
	installJS(t, k.JSDir)
	installPy(t, k.PyDir)
	return k
}

// Env is the process environment with the official SDKs pointed at a Cubby
// server: url is its API and gateway base (http://host:port), key an API key.
func Env(url, key string) []string {
	return append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_API_KEY="+key)
}

// Verdict is the last line of a script's output.
type Verdict struct {
	OK        bool   `json:"ok"`
	SandboxID string `json:"sandboxID"`
	CreateMs  int    `json:"createMs"`
	Line      string `json:"-"` // the line itself, for the test log
}

// RunJS runs node js/<script> args... with env and fails t unless it exits 0
// with a verdict {"ok": true}.
func (k Kit) RunJS(t testing.TB, what string, env []string, script string, args ...string) Verdict {
	t.Helper()
	return run(t, what, env, k.JSDir, append([]string{"node", script}, args...))
}

// RunPython runs python/<script> args... with the venv's python, as RunJS.
func (k Kit) RunPython(t testing.TB, what string, env []string, script string, args ...string) Verdict {
	t.Helper()
	return run(t, what, env, k.PyDir, append([]string{k.Python, script}, args...))
}

func run(t testing.TB, what string, env []string, dir string, argv []string) Verdict {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s\n%s", what, err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	v := Verdict{Line: lines[len(lines)-1]}
	if err := json.Unmarshal([]byte(v.Line), &v); err != nil || !v.OK {
		t.Fatalf("%s: verdict %q: %v\n%s", what, stdout.String(), err, stderr.String())
	}
	t.Logf("%s: %s (whole run %s)", what, v.Line, time.Since(began).Round(time.Millisecond))
	return v
}

// lock takes an exclusive flock on dir/.install.lock; the returned func releases it.
func lock(t testing.TB, dir string) func() {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatalf("testsdk: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("testsdk: lock %s: %v", f.Name(), err)
	}
	return func() { f.Close() }
}

// installJS runs npm ci in dir unless its lockfile is unchanged since the last install.
func installJS(t testing.TB, dir string) {
	t.Helper()
	stamp := filepath.Join(dir, "node_modules", stampName)
	sum := fileSum(t, filepath.Join(dir, "package.json"), filepath.Join(dir, "package-lock.json"))
	if old, err := os.ReadFile(stamp); err == nil && string(old) == sum {
		return
	}
	mustRun(t, dir, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	if err := os.WriteFile(stamp, []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
}

// installPy makes dir/.venv with dir/requirements.txt unless it is unchanged.
func installPy(t testing.TB, dir string) {
	t.Helper()
	venv := filepath.Join(dir, ".venv")
	stamp := filepath.Join(venv, stampName)
	sum := fileSum(t, filepath.Join(dir, "requirements.txt"))
	if old, err := os.ReadFile(stamp); err == nil && string(old) == sum {
		return
	}
	mustRun(t, dir, "python3", "-m", "venv", venv)
	mustRun(t, dir, filepath.Join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check", "-r", "requirements.txt")
	if err := os.WriteFile(stamp, []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRun(t testing.TB, dir string, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// fileSum is the hex SHA-256 of the files' contents, in order.
func fileSum(t testing.TB, paths ...string) string {
	t.Helper()
	h := sha256.New()
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(fmt.Errorf("testsdk: %w", err))
		}
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}
