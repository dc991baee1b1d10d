package security

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/sdk"
)

// memoryImages reads every memory image (runsc checkpoint: the gVisor
// kernel's state with its socket buffers, and every process's pages,
// uncompressed) of the server's snapshots, the forks' included, keyed by
// file.
func (s *server) memoryImages(t *testing.T) map[string][]byte {
	t.Helper()
	return readGlob(t, filepath.Join(s.DataDir, "snapshots", "*", "checkpoint", "*"))
}

// readGlob reads every file pattern matches, keyed by path.
func readGlob(t *testing.T, pattern string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[f] = data
	}
	return out
}

// imagesHold reports which memory images hold needle ("" never matches).
func imagesHold(images map[string][]byte, needle string) []string {
	if needle == "" {
		return nil
	}
	var in []string
	for f, data := range images {
		if bytes.Contains(data, []byte(needle)) {
			in = append(in, filepath.Base(f))
		}
	}
	return in
}

// runCode runs Python code in sbx's default context and returns its text result.
func runCode(t *testing.T, sbx *sdk.Sandbox, code string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exec, err := sbx.RunCode(ctx, code, nil)
	if err != nil {
		t.Fatalf("run %q in %s: %v", code, sbx.ID(), err)
	}
	if exec.Error != nil {
		return "error: " + exec.Error.Name + ": " + exec.Error.Value
	}
	return exec.Text()
}

// TestForkMemoryBoundary (gVisor): a fork continues the source's memory (a
// Python variable set before the fork) under an identity of its own, and the
// memory it starts from carries no client credential: the memory image the
// forks are restored from (every process's pages and the gVisor kernel's
// state) holds neither the source's access token nor its traffic token, only
// the agent's link credential; root in a fork finds no token in its files,
// cannot reach the source's agent ports at the source's address, and the
// source's link credential, which a fork holds, opens nothing at the gateway;
// tokens open only their own sandbox.
func TestForkMemoryBoundary(t *testing.T) {
	if !hasRunsc(t) {
		t.Skip("needs bin/runsc next to CUBBY_BIN")
	}
	s := startServer(t, "--runtime", "runsc")
	src := s.createWith(t, &sdk.CreateOptions{Template: "code-interpreter"})
	if got := runCode(t, src, "x = 42\nx"); got != "42" {
		t.Fatalf("source: x = %q", got)
	}
	srcAddr := strings.TrimSpace(asRoot(t, src, "awk 'END{print $1}' /etc/hosts").Out)
	secrets := []string{src.AccessToken(), src.TrafficAccessToken()}
	if secrets[0] == "" {
		t.Fatal("the source has no access token")
	}
	srcLink := agentapi.LinkToken(src.AccessToken())
	forks := s.forkOf(t, s.Key, src.ID(), 2)
	// The forks' memory image (kept while they run): the agent's credential
	// is in it, as it is in the forks' memory; no client credential is.
	images := s.memoryImages(t)
	if in := imagesHold(images, srcLink); len(in) == 0 {
		t.Errorf("the source's link credential is in none of %d memory image files: nothing was captured", len(images))
	}
	for i, secret := range secrets {
		if in := imagesHold(images, secret); len(in) > 0 {
			t.Errorf("the source's client token %d is in the memory image the forks run from: %v", i, in)
		}
	}
	for i, f := range forks {
		if got := runCode(t, f, "x"); got != "42" {
			t.Errorf("fork %d: x = %q, want the source's 42", i, got)
		}
		runCode(t, f, fmt.Sprintf("x = %d", 100+i))
		if h := strings.TrimSpace(asRoot(t, f, "hostname").Out); h != f.ID() {
			t.Errorf("fork %d hostname %q, want %s", i, h, f.ID())
		}
		if leak := asRoot(t, f, fmt.Sprintf("grep -rlsF -e %q -e %q /run /root /home /tmp /etc /var /opt 2>/dev/null", secrets[0], secrets[1])); leak.Out != "" {
			t.Errorf("fork %d: the source's tokens in its files: %q", i, leak.Out)
		}
		reach := asRoot(t, f, fmt.Sprintf(`for p in %d %d; do timeout 5 curl -sS -m 3 -H 'X-Access-Token: %s' http://%s:$p/envs >/dev/null 2>&1 && echo reached $p; done; true`,
			agentapi.EnvdPort, agentapi.InterpreterPort, srcLink, srcAddr))
		if strings.Contains(reach.Out, "reached") {
			t.Errorf("fork %d reaches the source's agent at %s: %q", i, srcAddr, reach.Out)
		}
		if code := s.envdStatus(t, src.ID(), f.AccessToken()); code != http.StatusUnauthorized {
			t.Errorf("fork %d's token opens the source: %d", i, code)
		}
		if code := s.envdStatus(t, f.ID(), src.AccessToken()); code != http.StatusUnauthorized {
			t.Errorf("the source's token opens fork %d: %d", i, code)
		}
	}
	if got := runCode(t, src, "x"); got != "42" {
		t.Errorf("source after the forks changed theirs: x = %q", got)
	}
	for _, id := range []string{src.ID(), forks[0].ID()} {
		if code := s.envdStatus(t, id, srcLink); code != http.StatusUnauthorized {
			t.Errorf("the source's link credential opens %s at the gateway: %d", id, code)
		}
	}
}

// hasRunsc reports whether runsc is next to the server binary.
func hasRunsc(t *testing.T) bool {
	for _, rt := range runtimes(t) {
		if rt == "runsc" {
			return true
		}
	}
	return false
}

// TestAgentMemoryHoldsNoClientToken (gVisor): the memory of a sandbox used
// through every credential the SDK sends (commands with X-Access-Token, code
// with the traffic token, a signed download URL) holds none of them. Pausing
// it under gVisor writes its whole memory (every process's pages and the
// gVisor kernel's state, socket buffers included) to the host; the image
// holds a value the code interpreter made (the scan reads what a memory
// snapshot carries) and neither token nor the URL's signature.
func TestAgentMemoryHoldsNoClientToken(t *testing.T) {
	if !hasRunsc(t) {
		t.Skip("needs bin/runsc next to CUBBY_BIN")
	}
	s := startServer(t, "--runtime", "runsc")
	sbx := s.createWith(t, &sdk.CreateOptions{Template: "code-interpreter"})
	canary := runCode(t, sbx, "canary = 'cnry' + 'x' * 3 + '%x' % 0xfeedface * 2\ncanary")
	asRoot(t, sbx, "echo signed > /tmp/f")
	u, err := sbx.DownloadURL("/tmp/f", &sdk.FileURLOptions{User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(u)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("signed download: %v %v", err, resp)
	}
	resp.Body.Close()
	sig := mustQuery(t, u, "signature")
	if sbx.AccessToken() == "" {
		t.Fatal("the sandbox has no access token")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := sbx.Pause(ctx, nil); err != nil {
		t.Fatal(err)
	}
	images := readGlob(t, filepath.Join(s.DataDir, "sandboxes", sbx.ID(), "checkpoint", "*"))
	if in := imagesHold(images, strings.Trim(canary, "'")); len(in) == 0 {
		t.Fatalf("the interpreter's value %s is in none of %d image files: nothing was captured", canary, len(images))
	}
	for name, secret := range map[string]string{"access token": sbx.AccessToken(),
		"traffic token": sbx.TrafficAccessToken(), "URL signature": sig} {
		if in := imagesHold(images, secret); len(in) > 0 {
			t.Errorf("the sandbox's memory holds its %s: %v", name, in)
		}
	}
}

func mustQuery(t *testing.T, raw, key string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Query().Get(key) == "" {
		t.Fatalf("URL %q has no %s: %v", raw, key, err)
	}
	return u.Query().Get(key)
}
