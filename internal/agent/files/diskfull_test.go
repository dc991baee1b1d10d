package files

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// mountSmallTmpfs mounts a fresh 1 MiB tmpfs (unmounted in Cleanup).
func mountSmallTmpfs(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	dir := filepath.Join(t.TempDir(), "tmnt"+hex.EncodeToString(suffix))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// onlyReader hides Len/Seek so the request goes out chunked, without a
// Content-Length the server could check up front.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func TestUploadDiskFull(t *testing.T) {
	e := newEnv(t, "")
	mnt := mountSmallTmpfs(t)
	keep := filepath.Join(mnt, "keep.txt")
	if err := os.WriteFile(keep, []byte("old content"), 0o644); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 2<<20/16) // 2 MiB

	// Known length: refused before anything is written.
	fresh := filepath.Join(mnt, "sub", "big.bin")
	r := e.post(t, e.filesURL("path", fresh), "application/octet-stream", bytes.NewReader(big))
	wantError(t, r, http.StatusInsufficientStorage)

	// Unknown length: the write hits ENOSPC, the temp file goes away.
	for _, dest := range []string{fresh, keep} {
		r = e.post(t, e.filesURL("path", dest), "application/octet-stream", onlyReader{bytes.NewReader(big)})
		wantError(t, r, http.StatusInsufficientStorage)
	}
	ctype, body := multipartBody(t, [][2]string{{fresh, string(big)}})
	r = e.post(t, e.filesURL(), ctype, onlyReader{body})
	wantError(t, r, http.StatusInsufficientStorage)

	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Fatalf("partial file left: %v", err)
	}
	if got := readFile(t, keep); got != "old content" {
		t.Fatalf("existing file changed to %d bytes", len(got))
	}
	var left []string
	filepath.WalkDir(mnt, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) != 1 || left[0] != keep {
		t.Fatalf("files left on the tmpfs: %v", left)
	}
}
