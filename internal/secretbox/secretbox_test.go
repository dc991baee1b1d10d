package secretbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestSealOpen(t *testing.T) {
	b, err := LoadOrCreate(filepath.Join(t.TempDir(), "key"))
	if err != nil {
		t.Fatal(err)
	}
	sealed := b.Seal([]byte("sk-live-123"), []byte("team/sec_1"))
	if bytes.Contains(sealed, []byte("sk-live-123")) {
		t.Fatal("sealed value holds the plaintext")
	}
	got, err := b.Open(sealed, []byte("team/sec_1"))
	if err != nil || string(got) != "sk-live-123" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := b.Open(sealed, []byte("team/sec_2")); !errors.Is(err, ErrOpen) {
		t.Fatalf("other associated data: %v", err)
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := b.Open(sealed, []byte("team/sec_1")); !errors.Is(err, ErrOpen) {
		t.Fatalf("tampered: %v", err)
	}
	if _, err := b.Open([]byte{1, 2}, nil); !errors.Is(err, ErrOpen) {
		t.Fatalf("short: %v", err)
	}
}

func TestKeyFilePersistsAndIsPrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	b1, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 || st.Size() != KeySize {
		t.Fatalf("key file: %v %v", st, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	b2, err := LoadOrCreate(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("key file left %v", st.Mode())
	}
	got, err := b2.Open(b1.Seal([]byte("v"), nil), nil)
	if err != nil || string(got) != "v" {
		t.Fatalf("a reloaded key must open old values: %q %v", got, err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(path); err == nil {
		t.Fatal("a key file of the wrong size must be refused")
	}
}
