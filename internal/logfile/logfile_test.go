package logfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func sizeOf(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestRotatingStaysUnderCap writes far more than the cap from several
// goroutines: both files stay at or under it, every line is whole and the tail
// holds the most recent lines.
func TestRotatingStaysUnderCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.log")
	const maxBytes = 4096
	r, err := Open(path, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 500 {
				if _, err := fmt.Fprintf(r, "g%d line %04d %s\n", g, i, strings.Repeat("x", i%50)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if _, err := r.Write([]byte("last line\n")); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if a, b := sizeOf(t, path), sizeOf(t, path+PrevSuffix); a > maxBytes || b > maxBytes || b == 0 {
		t.Fatalf("sizes %d and %d, cap %d (predecessor must exist)", a, b, maxBytes)
	}
	data, _, err := ReadTail(path, 2*maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if lines[len(lines)-1] != "last line" || len(lines) < maxBytes/70 {
		t.Fatalf("tail ends %q, %d lines", lines[len(lines)-1], len(lines))
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "g") && l != "last line" {
			t.Fatalf("partial line %q", l)
		}
	}
	if _, err := r.Write([]byte("x\n")); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
}

// TestRotatingCutsOversizeWrite: one write longer than the cap is cut to it
// and ends with a newline.
func TestRotatingCutsOversizeWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.log")
	r, err := Open(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	big := bytes.Repeat([]byte("y"), 1000)
	if n, err := r.Write(big); n != 1000 || err != nil {
		t.Fatalf("write = %d, %v", n, err)
	}
	data, _ := os.ReadFile(path)
	if len(data) != 100 || data[99] != '\n' || big[99] != 'y' {
		t.Fatalf("file holds %d bytes ending %q (caller's buffer changed: %v)", len(data), data[len(data)-1:], big[99] != 'y')
	}
}

// TestOpenExistingRotatesWhenFull: a log reopened at its cap rotates on the
// next write; a non-regular file is refused.
func TestOpenExistingRotatesWhenFull(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.log")
	if err := os.WriteFile(path, bytes.Repeat([]byte("old\n"), 25), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("new\n")); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if cur, _ := os.ReadFile(path); string(cur) != "new\n" || sizeOf(t, path+PrevSuffix) != 100 {
		t.Fatalf("after reopen: %q, predecessor %d bytes", cur, sizeOf(t, path+PrevSuffix))
	}
	if _, err := Open(dir, 100); err == nil {
		t.Fatal("opened a directory as a log")
	}
	if _, err := Open(path, 0); err == nil {
		t.Fatal("zero cap accepted")
	}
}

// TestReadTail: the tail spans the predecessor, starts on a whole line, and a
// missing log is os.ErrNotExist.
func TestReadTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.log")
	if err := os.WriteFile(path+PrevSuffix, []byte("p1\np2\np3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("c1\nc2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int64]string{100: "p1\np2\np3\nc1\nc2\n", 10: "p3\nc1\nc2\n", 4: "c2\n", 6: "c1\nc2\n"} {
		got, _, err := ReadTail(path, n)
		if err != nil || string(got) != want {
			t.Errorf("ReadTail(%d) = %q, %v; want %q", n, got, err, want)
		}
	}
	if _, _, err := ReadTail(filepath.Join(dir, "none"), 10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing log: %v", err)
	}
}
