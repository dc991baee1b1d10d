package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	for _, c := range []struct {
		data string
		perm os.FileMode
	}{{"one", 0o600}, {"two, longer", 0o644}, {"3", 0o600}} {
		if err := Write(p, []byte(c.data), c.perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		st, serr := os.Stat(p)
		if err != nil || serr != nil || string(got) != c.data || st.Mode().Perm() != c.perm {
			t.Fatalf("after Write(%q, %o): %q %v, mode %v %v", c.data, c.perm, got, err, st.Mode(), serr)
		}
	}
	if err := SyncDir(dir); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary files left: %v", entries)
	}
}

// TestWriteFailureKeepsOld: a write that cannot be renamed into place (the
// target is a directory) leaves the target and no temporary file.
func TestWriteFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "d")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(target, []byte("new"), 0o600); err == nil {
		t.Fatal("Write over a non-empty directory succeeded")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 || entries[0].Name() != "d" {
		t.Fatalf("left behind: %v", entries)
	}
	if err := SyncDir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("SyncDir of a missing directory succeeded")
	}
}
