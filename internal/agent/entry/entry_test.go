package entry

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cubby-dev/cubby/internal/envdpb/filesystem"
)

func TestBuildSymlinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("d", filepath.Join(dir, "dlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("gone", filepath.Join(dir, "broken")); err != nil {
		t.Fatal(err)
	}
	b := NewBuilder()
	e, err := b.Build(filepath.Join(dir, "dlink"), "/shown/dlink")
	if err != nil {
		t.Fatal(err)
	}
	if e.GetType() != filesystem.FileType_FILE_TYPE_DIRECTORY || e.GetMode() != 0o750 ||
		e.GetSymlinkTarget() != filepath.Join(dir, "d") || e.GetPath() != "/shown/dlink" || e.GetName() != "dlink" {
		t.Fatalf("dir link = %v", e)
	}
	e, err = b.Build(filepath.Join(dir, "broken"), filepath.Join(dir, "broken"))
	if err != nil {
		t.Fatal(err)
	}
	if e.GetType() != filesystem.FileType_FILE_TYPE_SYMLINK || e.GetSymlinkTarget() != filepath.Join(dir, "gone") ||
		e.GetPermissions() != "Lrwxrwxrwx" || len(e.GetMetadata()) != 0 {
		t.Fatalf("broken link = %v", e)
	}
	if _, err := b.Build(filepath.Join(dir, "missing"), "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
}

func TestMkdirAll(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a", "b")
	if err := MkdirAll(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{p, filepath.Dir(p)} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o755 || st.Uid != 65534 || st.Gid != 65534 {
			t.Fatalf("%s: mode %v uid %d gid %d", d, fi.Mode(), st.Uid, st.Gid)
		}
	}
	if fi, _ := os.Stat(dir); fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Fatal("existing directory was chowned")
	}
	f := filepath.Join(dir, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(f, "sub"), 0, 0); !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("through a file: %v", err)
	}
}

func TestUploadTemp(t *testing.T) {
	for _, replacing := range []bool{false, true} {
		f, err := os.CreateTemp(t.TempDir(), UploadTempPattern(replacing))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if temp, r := UploadTemp(filepath.Base(f.Name())); !temp || r != replacing {
			t.Fatalf("UploadTemp(%s) = %v %v", f.Name(), temp, r)
		}
	}
	if temp, _ := UploadTemp("notes.txt"); temp {
		t.Fatal("ordinary name taken for a temporary")
	}
}
