package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOfficialSDKs: the official E2B SDKs (JS and Python, unchanged,
// configured only by E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY) create a
// code-interpreter sandbox through a replica, run a command, write and read
// a file, get a chart from runCode and kill it; then the same through the
// second replica.
func TestOfficialSDKs(t *testing.T) {
	f := nodeFleet(t, 2)
	js, py := sdkDir(t, "js"), sdkDir(t, "python")
	installJS(t, js)
	installPy(t, py)
	for _, r := range f.replicas {
		env := append(os.Environ(), "E2B_API_URL="+r.URL(""), "E2B_SANDBOX_URL="+r.URL(""), "E2B_API_KEY="+f.key)
		runSDK(t, "JS through "+r.Name, env, js, "node", "sdk.mjs")
		runSDK(t, "Python through "+r.Name, env, py, filepath.Join(py, ".venv", "bin", "python"), "sdk_check.py")
	}
}

// sdkDir is test/cluster/sdk/<lang>.
func sdkDir(t *testing.T, lang string) string {
	t.Helper()
	d, err := filepath.Abs(filepath.Join("sdk", lang))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// runSDK runs one SDK script and checks its JSON verdict.
func runSDK(t *testing.T, what string, env []string, dir string, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s\n%s", what, err, stdout.String(), stderr.String())
	}
	var verdict struct {
		OK        bool   `json:"ok"`
		SandboxID string `json:"sandboxID"`
		CreateMs  int    `json:"createMs"`
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &verdict); err != nil || !verdict.OK {
		t.Fatalf("%s: verdict %q: %v", what, stdout.String(), err)
	}
	t.Logf("%s: sandbox %s created in %d ms, whole run %s", what, verdict.SandboxID, verdict.CreateMs, time.Since(began).Round(time.Millisecond))
}

// installJS runs npm ci in dir unless its lockfile is unchanged since the last install.
func installJS(t *testing.T, dir string) {
	t.Helper()
	stamp := filepath.Join(dir, "node_modules", ".cubby-stamp")
	sum := fileSum(t, filepath.Join(dir, "package.json"), filepath.Join(dir, "package-lock.json"))
	if old, err := os.ReadFile(stamp); err == nil && string(old) == sum {
		return
	}
	run(t, dir, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	if err := os.WriteFile(stamp, []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
}

// installPy makes dir/.venv with dir/requirements.txt unless it is unchanged.
func installPy(t *testing.T, dir string) {
	t.Helper()
	venv := filepath.Join(dir, ".venv")
	stamp := filepath.Join(venv, ".cubby-stamp")
	sum := fileSum(t, filepath.Join(dir, "requirements.txt"))
	if old, err := os.ReadFile(stamp); err == nil && string(old) == sum {
		return
	}
	run(t, dir, "python3", "-m", "venv", venv)
	run(t, dir, filepath.Join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check", "-r", "requirements.txt")
	if err := os.WriteFile(stamp, []byte(sum), 0o644); err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, dir string, argv ...string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

func fileSum(t *testing.T, paths ...string) string {
	t.Helper()
	h := sha256.New()
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))
}
