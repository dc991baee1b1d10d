package rootfs

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveInRoot: the path is resolved with the tree as "/" (an absolute
// symlink leads inside the tree, never to the host), its last component is
// not followed, and a missing path is no error.
func TestRemoveInRoot(t *testing.T) {
	host := t.TempDir()
	outside := filepath.Join(host, "outside")
	tree := filepath.Join(host, "tree")
	for _, d := range []string{filepath.Join(outside, "cubby"), filepath.Join(tree, "var", "run2", "cubby"), filepath.Join(tree, "etc")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p string) {
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(outside, "cubby", "keep"))
	write(filepath.Join(tree, "var", "run2", "cubby", "init.json"))
	write(filepath.Join(tree, "etc", "keep"))
	// /run -> /var/run2 as the sandbox sees it; /link -> the host's outside dir.
	if err := os.Symlink("/var/run2", filepath.Join(tree, "run")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(tree, "last")); err != nil {
		t.Fatal(err)
	}
	root, err := os.Open(tree)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, p := range []string{"/run/cubby", outside + "/cubby", "/link/cubby", "/last", "/missing/x", "/../../x"} {
		if err := removeInRoot(root, p); err != nil {
			t.Fatalf("remove %s: %v", p, err)
		}
	}
	for _, gone := range []string{filepath.Join(tree, "var", "run2", "cubby"), filepath.Join(tree, "last")} {
		if _, err := os.Lstat(gone); !os.IsNotExist(err) {
			t.Errorf("%s not removed: %v", gone, err)
		}
	}
	for _, kept := range []string{filepath.Join(outside, "cubby", "keep"), filepath.Join(tree, "etc", "keep"), filepath.Join(tree, "link")} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s removed: %v", kept, err)
		}
	}
	if err := removeInRoot(root, "/"); err == nil {
		t.Error("removing the root was accepted")
	}
}
