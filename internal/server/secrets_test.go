package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/controlplane"
	"github.com/cubby-dev/cubby/internal/store"
)

func keyService(t *testing.T, dir string) *controlplane.Service {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(dir, "cubby.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cp, err := controlplane.New(controlplane.Config{}, controlplane.Deps{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestFirstKeyNeverInTheLog: without a terminal the first key goes to a 0600
// file, and nothing that looks like a key is written to the output or the log.
func TestFirstKeyNeverInTheLog(t *testing.T) {
	dir := t.TempDir()
	cp := keyService(t, dir)
	var out, logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cfg := Config{DataDir: dir, Progress: &out}
	if err := firstKey(context.Background(), cfg, cp, log); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, firstKeyFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Errorf("%s is %v, want 0600", firstKeyFile, st.Mode().Perm())
	}
	key := regexp.MustCompile(`^e2b_[0-9a-f]{40}\n$`)
	if !key.Match(data) {
		t.Fatalf("%s holds %q", firstKeyFile, data)
	}
	both := out.String() + logged.String()
	if strings.Contains(both, strings.TrimSpace(string(data))) || !strings.Contains(logged.String(), path) {
		t.Fatalf("output %q, log %q", out.String(), logged.String())
	}
	// A second start creates nothing.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := firstKey(context.Background(), cfg, cp, log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("second start wrote a key again: %v", err)
	}
}

// TestNoFirstKeyWithEnvKey: with CUBBY_API_KEY the operator has a key, so none is made.
func TestNoFirstKeyWithEnvKey(t *testing.T) {
	dir := t.TempDir()
	cp := keyService(t, dir)
	cfg := Config{DataDir: dir, Progress: io.Discard, EnvAPIKey: "e2b_" + strings.Repeat("0", 40)}
	if err := firstKey(context.Background(), cfg, cp, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if keys, err := cp.ListAPIKeys(context.Background()); err != nil || len(keys) != 0 {
		t.Fatalf("keys = %+v, %v", keys, err)
	}
}

func TestRestrictLogFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cubby.log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Chmod(path, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := RestrictLogFiles(f, w); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("log is %v, want 0600", st.Mode().Perm())
	}
}
