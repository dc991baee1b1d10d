package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
)

// TestFilesCp copies files both ways, into directories, through stdin and
// stdout, and checks the progress bar on a terminal.
func TestFilesCp(t *testing.T) {
	s := need(t)
	id := s.newSandbox(t).SandboxID
	dir := t.TempDir()

	data := make([]byte, 3<<20+123)
	_, _ = rand.Read(data)
	src := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	s.ok(t, "files", "cp", src, id+":/tmp/up.bin")
	if out := s.ok(t, "exec", id, "--", "sha256sum /tmp/up.bin"); !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
		t.Errorf("uploaded file: sha256sum %q, want %x", out, sum)
	}
	// A directory destination keeps the file's name.
	s.ok(t, "files", "cp", src, id+":/tmp/")
	s.ok(t, "exec", id, "--", "mkdir -p /tmp/d")
	s.ok(t, "files", "cp", src, id+":/tmp/d")
	if out := s.ok(t, "exec", id, "--", "cmp /tmp/big.bin /tmp/up.bin && cmp /tmp/d/big.bin /tmp/up.bin && echo same"); out != "same\n" {
		t.Errorf("copies into directories: %q", out)
	}

	down := filepath.Join(dir, "down")
	if err := os.Mkdir(down, 0o755); err != nil {
		t.Fatal(err)
	}
	s.ok(t, "files", "cp", id+":/tmp/up.bin", down)
	if got, err := os.ReadFile(filepath.Join(down, "up.bin")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("downloaded into a directory: %d bytes, err %v", len(got), err)
	}
	s.ok(t, "files", "cp", id+":/tmp/up.bin", filepath.Join(dir, "renamed.bin"))
	if got, err := os.ReadFile(filepath.Join(dir, "renamed.bin")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("downloaded to a file name: %d bytes, err %v", len(got), err)
	}

	// stdin and stdout; relative sandbox paths start at the user's home.
	if r := s.cli(t, runOpts{stdin: "from stdin\n"}, "files", "cp", "-", id+":notes/s.txt"); r.code != 0 {
		t.Fatalf("cp - : %s", r)
	}
	if out := s.ok(t, "files", "cp", id+":notes/s.txt", "-"); out != "from stdin\n" {
		t.Errorf("cp to -: %q", out)
	}

	r := s.cli(t, runOpts{}, "files", "cp", id+":/tmp/missing.txt", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "no such file") {
		t.Errorf("missing source: %s", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "missing.txt")); !os.IsNotExist(err) {
		t.Errorf("a failed download left a file: %v", err)
	}
	r = s.cli(t, runOpts{}, "files", "cp", dir, id+":/tmp/")
	if r.code != 1 || !strings.Contains(r.stderr, "is a directory") {
		t.Errorf("directory source: %s", r)
	}
	r = s.cli(t, runOpts{}, "files", "cp", src, filepath.Join(dir, "x"))
	if r.code != 1 || !strings.Contains(r.stderr, "SANDBOX-ID:/path") {
		t.Errorf("two local paths: %s", r)
	}

	t.Run("progress", func(t *testing.T) { testProgress(t, s, id, src) })
}

// testProgress runs an upload with stderr on a terminal and checks that a
// progress bar reaching 100% was drawn.
func testProgress(t *testing.T, s *server, id, src string) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.Bin, "files", "cp", src, id+":/tmp/progress.bin")
	cmd.Env = s.env(nil)
	cmd.Stderr = tty
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close()
	screen := newScreen(ptmx)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cp with a terminal: %v\n%s", err, screen.String())
	}
	if !screen.waitFor(regexpMust(`100%\s+3\.0 MiB / 3\.0 MiB`), 10*time.Second) {
		t.Errorf("no finished progress bar on the terminal: %q", screen.String())
	}
}
