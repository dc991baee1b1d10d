package nsfs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestBindCheckRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "net")
	if err := Bind("/proc/self/ns/net", p); err != nil {
		t.Fatal(err)
	}
	if err := Check(p, unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	if err := Check(p, unix.CLONE_NEWUSER); err == nil {
		t.Fatal("a network namespace file passed as a user namespace file")
	}
	if err := Bind("/proc/self/ns/net", p); err == nil {
		t.Fatal("Bind over an existing file succeeded")
	}
	if err := Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("file left after Remove: %v", err)
	}
	if err := Remove(p); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Check(plain, unix.CLONE_NEWNET); err == nil {
		t.Fatal("a plain file passed Check")
	}
	if err := Bind("/nonexistent/ns", filepath.Join(dir, "bad")); err == nil {
		t.Fatal("Bind of a missing source succeeded")
	}
	if _, err := os.Lstat(filepath.Join(dir, "bad")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("failed Bind left its file: %v", err)
	}
}
