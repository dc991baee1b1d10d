package template

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// upload is an archive as the SDKs upload it: paths relative to the
// context directory, directories included.
func upload(t *testing.T, gz bool, entries ...string) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		name, link, _ := strings.Cut(e, "=>")
		h := &tar.Header{Name: name, Mode: 0o644, Uid: 501, Gid: 20, ModTime: time.Unix(1e9, 0), Typeflag: tar.TypeReg}
		switch {
		case strings.HasSuffix(name, "/"):
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case link != "":
			h.Typeflag, h.Linkname = tar.TypeLink, link
		default:
			h.Size = int64(len(name))
		}
		tw.WriteHeader(h)
		if h.Typeflag == tar.TypeReg {
			io.WriteString(tw, name)
		}
	}
	tw.Close()
	if zw != nil {
		zw.Close()
	}
	return bytes.NewReader(buf.Bytes())
}

// plan runs a COPY of src to dest over a tree that has /srv as a directory
// and returns the layer's entries ("name mode uid:gid [-> link]").
func plan(t *testing.T, src, dest, mode string, f *bytes.Reader) (string, error) {
	t.Helper()
	tree := t.TempDir()
	os.MkdirAll(filepath.Join(tree, "srv"), 0o755)
	c := copyPlan{src: src, dest: dest, tree: tree, workdir: "/home/user", uid: 1000, gid: 1000}
	c.mode, c.setMode = copyMode(mode)
	if err := c.scan(f); err != nil {
		return "", err
	}
	f.Seek(0, io.SeekStart)
	var out bytes.Buffer
	if err := c.rewrite(f, &out); err != nil {
		return "", err
	}
	var got []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		s := fmt.Sprintf("%s %o %d:%d", h.Name, h.Mode, h.Uid, h.Gid)
		if h.Linkname != "" {
			s += " -> " + h.Linkname
		}
		got = append(got, s)
	}
	sort.Strings(got)
	return strings.Join(got, "\n"), nil
}

func TestCopyPlan(t *testing.T) {
	for _, tc := range []struct {
		name, src, dest, mode string
		entries               []string
		want                  string
	}{
		{"directory contents into dest", "app/", "/app", "", []string{"app/", "app/main.py", "app/pkg/", "app/pkg/x.py"},
			"app/ 755 1000:1000\napp/ 755 1000:1000\napp/main.py 644 1000:1000\napp/pkg/ 755 1000:1000\napp/pkg/x.py 644 1000:1000"},
		{"file onto dest", "hello.txt", "/opt/greeting", "0600", []string{"hello.txt"}, "opt/greeting 600 1000:1000"},
		{"file into dest/", "hello.txt", "/opt/", "", []string{"hello.txt"}, "opt/ 755 1000:1000\nopt/hello.txt 644 1000:1000"},
		{"file into an existing directory", "hello.txt", "/srv", "", []string{"hello.txt"}, "srv/ 755 1000:1000\nsrv/hello.txt 644 1000:1000"},
		{"relative dest from the workdir", "hello.txt", "notes.txt", "", []string{"hello.txt"}, "home/user/notes.txt 644 1000:1000"},
		{"glob of files", "*.txt", "/data", "", []string{"a.txt", "b.txt"}, "data/ 755 1000:1000\ndata/a.txt 644 1000:1000\ndata/b.txt 644 1000:1000"},
		{"globstar", "src/**/*.py", "/py", "", []string{"src/a/b/m.py", "src/n.py"}, "py/ 755 1000:1000\npy/m.py 644 1000:1000\npy/n.py 644 1000:1000"},
		{"hard link mapped", "d", "/x", "", []string{"d/", "d/a", "d/b=>d/a"}, "x/ 755 1000:1000\nx/ 755 1000:1000\nx/a 644 1000:1000\nx/b 644 1000:1000 -> x/a"},
		{"dot: the whole upload", ".", "/", "", []string{"etc/", "etc/conf"}, "etc/ 755 1000:1000\netc/conf 644 1000:1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, gz := range []bool{false, true} {
				got, err := plan(t, tc.src, tc.dest, tc.mode, upload(t, gz, tc.entries...))
				if err != nil || got != tc.want {
					t.Errorf("gzip=%v:\ngot  %q (%v)\nwant %q", gz, got, err, tc.want)
				}
			}
		})
	}
}

func TestCopyPlanErrors(t *testing.T) {
	if _, err := plan(t, "missing", "/x", "", upload(t, false, "other")); err == nil || !strings.Contains(err.Error(), "nothing matching") {
		t.Errorf("no match: %v", err)
	}
	if _, err := plan(t, "d", "/x", "", upload(t, false, "d/", "d/.wh.passwd")); err == nil || !strings.Contains(err.Error(), ".wh.") {
		t.Errorf("whiteout name: %v", err)
	}
	if _, err := plan(t, "d", "/x", "", upload(t, false, "d/", "d/l=>etc/shadow")); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("hard link out of the copied files: %v", err)
	}
	if _, err := plan(t, "d", "/x", "", bytes.NewReader([]byte("not a tar archive at all, sorry"))); err == nil {
		t.Error("garbage accepted")
	}
}
