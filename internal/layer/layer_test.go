package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (owners, xattrs, overlay mounts)")
	}
}

// entry is one tar entry of a test layer.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64
	uid, gid         int
	xattrs           map[string]string
}

var mtime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

func layerTar(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if e.typ == 0 {
			e.typ = tar.TypeReg
		}
		if e.mode == 0 {
			e.mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: mtime, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if e.typ == tar.TypeChar {
			hdr.Devmajor, hdr.Devminor = 1, 1
		}
		for k, v := range e.xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords[paxXattrPrefix+k] = v
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf
}

func apply(t *testing.T, dir string, entries ...entry) Stats {
	t.Helper()
	st, err := Apply(context.Background(), dir, layerTar(t, entries...), ApplyOptions{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return st
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestApplyEntries(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	st := apply(t, dir,
		entry{name: "./", typ: tar.TypeDir, mode: 0o755},
		entry{name: "usr/bin/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "usr/bin/su", body: "su", mode: 0o4755},
		entry{name: "usr/bin/ping", body: "ping", mode: 0o755, xattrs: map[string]string{
			"security.capability": string(capNetRaw()), "user.note": "kept", "trusted.overlay.opaque": "y"}},
		entry{name: "home/user/", typ: tar.TypeDir, mode: 0o750, uid: 1000, gid: 1000},
		entry{name: "home/user/file", body: "hello", uid: 1000, gid: 1000},
		entry{name: "etc/alternatives/x", typ: tar.TypeSymlink, link: "/usr/bin/ping"},
		entry{name: "usr/bin/su2", typ: tar.TypeLink, link: "usr/bin/su"},
		entry{name: "run/fifo", typ: tar.TypeFifo, mode: 0o620},
		entry{name: "dev/mem", typ: tar.TypeChar, mode: 0o666},
		entry{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
	)
	if st.Skipped != 1 || st.Xattrs != 2 || st.Dropped != 1 || st.Linked != 1 {
		t.Errorf("stats = %+v", st)
	}
	for p, want := range map[string]string{
		"usr/bin/su": "4755 0:0 reg", "home/user": "750 1000:1000 dir", "home/user/file": "644 1000:1000 reg",
		"run/fifo": "620 0:0 fifo", "tmp": "1777 0:0 dir", "etc/alternatives/x": "777 0:0 link",
	} {
		if got := describe(t, filepath.Join(dir, p)); got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "dev/mem")); !os.IsNotExist(err) {
		t.Errorf("device node was created: %v", err)
	}
	var a, b unix.Stat_t
	unix.Stat(filepath.Join(dir, "usr/bin/su"), &a)
	unix.Stat(filepath.Join(dir, "usr/bin/su2"), &b)
	if a.Ino != b.Ino || a.Nlink != 2 {
		t.Errorf("hard link not kept: %d/%d nlink %d", a.Ino, b.Ino, a.Nlink)
	}
	caps := make([]byte, 64)
	if n, err := unix.Lgetxattr(filepath.Join(dir, "usr/bin/ping"), "security.capability", caps); err != nil || !bytes.Equal(caps[:n], capNetRaw()) {
		t.Errorf("file capability: %v %x", err, caps[:n])
	}
	if _, err := unix.Lgetxattr(filepath.Join(dir, "usr/bin/ping"), "trusted.overlay.opaque", caps); err == nil {
		t.Error("trusted.overlay.opaque was applied")
	}
	fi, _ := os.Stat(filepath.Join(dir, "home/user"))
	if !fi.ModTime().Equal(mtime) {
		t.Errorf("directory mtime %v, want %v", fi.ModTime(), mtime)
	}
}

// capNetRaw is a VFS_CAP_REVISION_2 security.capability value granting cap_net_raw.
func capNetRaw() []byte {
	b := make([]byte, 20)
	b[0], b[3] = 0x01, 0x02 // magic_etc 0x02000001: revision 2, effective
	b[5] = 0x20             // data[0].permitted = 1<<13 (CAP_NET_RAW), little endian
	return b
}

func runSh(script string, args ...string) ([]byte, error) {
	return exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...).CombinedOutput()
}

func describe(t *testing.T, p string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err.Error()
	}
	kind := map[uint32]string{unix.S_IFREG: "reg", unix.S_IFDIR: "dir", unix.S_IFLNK: "link", unix.S_IFIFO: "fifo"}[st.Mode&unix.S_IFMT]
	return fmt.Sprintf("%o %d:%d %s", st.Mode&0o7777, st.Uid, st.Gid, kind)
}

func TestApplyWhiteouts(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	apply(t, dir,
		entry{name: "a/x", body: "x"}, entry{name: "a/y", body: "y"},
		entry{name: "b/deep/f", body: "f"}, entry{name: "c/old", body: "old"}, entry{name: "c/sub/old", body: "old"})
	apply(t, dir,
		entry{name: "a/.wh.x"}, entry{name: ".wh.b"},
		entry{name: "c/", typ: tar.TypeDir, mode: 0o755}, entry{name: "c/new", body: "new"},
		entry{name: "c/.wh..wh..opq"}, entry{name: "c/later", body: "later"})
	if got := list(t, dir); got != "a/ a/y c/ c/later c/new" {
		t.Errorf("tree after whiteouts: %q", got)
	}
}

func list(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			rel += "/"
		}
		out = append(out, rel)
		return nil
	})
	sort.Strings(out)
	return strings.Join(out, " ")
}

// TestApplyConfined feeds layers an attacker would write: names climbing out
// of the tree, symlinks to host paths followed by entries written through
// them, hard links to host files. Nothing may appear or change outside dir.
func TestApplyConfined(t *testing.T) {
	needRoot(t)
	host := t.TempDir()
	victim := filepath.Join(host, "victim")
	os.WriteFile(victim, []byte("host secret"), 0o600)
	dir := filepath.Join(host, "tree")
	os.Mkdir(dir, 0o755)
	apply(t, dir,
		entry{name: "../escape-dotdot", body: "x"},
		entry{name: "/escape-abs", body: "x"},
		entry{name: "abs", typ: tar.TypeSymlink, link: host},
		entry{name: "rel", typ: tar.TypeSymlink, link: "../../../../../../" + strings.TrimPrefix(host, "/")},
		entry{name: "abs/escape-through-abs", body: "x"},
		entry{name: "rel/escape-through-rel", body: "x"},
		entry{name: "victim", typ: tar.TypeSymlink, link: victim},
	)
	// A regular file over a symlink replaces the symlink; it never writes through it.
	apply(t, dir, entry{name: "victim", body: "overwritten"})
	// A hard link's target resolves inside the tree too.
	apply(t, dir, entry{name: "stolen", typ: tar.TypeLink, link: "../../victim"})
	if got := readFile(t, filepath.Join(dir, "stolen")); got != "overwritten" {
		t.Errorf("hard link resolved to %q", got)
	}
	_, err := Apply(context.Background(), dir, layerTar(t, entry{name: "stolen2", typ: tar.TypeLink, link: "../missing"}), ApplyOptions{})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("hard link to a missing target: %v", err)
	}
	if got := readFile(t, victim); got != "host secret" {
		t.Errorf("host file changed: %q", got)
	}
	// Entries written through the symlinks land where the symlinks point
	// inside the tree: tree/<host path>/.
	want := []string{"tree/", "tree/abs", "tree/escape-abs", "tree/escape-dotdot", "tree/rel", "tree/stolen", "tree/victim", "victim"}
	inner := "tree"
	for _, c := range strings.Split(strings.TrimPrefix(host, "/"), "/") {
		inner += "/" + c
		want = append(want, inner+"/")
	}
	want = append(want, inner+"/escape-through-abs", inner+"/escape-through-rel")
	sort.Strings(want)
	if got := list(t, host); got != strings.Join(want, " ") {
		t.Errorf("entries outside or misplaced:\n got  %s\n want %s", got, strings.Join(want, " "))
	}
}

func TestCloneThenApplyLeavesSource(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	src := filepath.Join(base, "src")
	os.Mkdir(src, 0o755)
	apply(t, src, entry{name: "etc/conf", body: "v1", mode: 0o640, uid: 5, gid: 6},
		entry{name: "etc/keep", body: "keep"}, entry{name: "bin/sh", typ: tar.TypeSymlink, link: "dash"})
	before := fingerprint(t, src)
	dst := filepath.Join(base, "dst")
	st, err := Clone(context.Background(), src, dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Linked != 3 {
		t.Errorf("clone stats %+v", st)
	}
	if fingerprint(t, dst) != before {
		t.Fatal("clone differs from its source")
	}
	apply(t, dst, entry{name: "etc/conf", body: "v2", mode: 0o600}, entry{name: "etc/.wh.keep"})
	if fingerprint(t, src) != before {
		t.Fatal("applying onto the clone changed the source")
	}
	if readFile(t, filepath.Join(dst, "etc/conf")) != "v2" {
		t.Fatal("clone not updated")
	}
}

// fingerprint hashes every path, mode, owner, size, mtime, content and link target.
func fingerprint(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		link, _ := os.Readlink(p)
		mt := int64(0)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR { // directory mtimes change as entries are written
			mt = st.Mtim.Nano()
		}
		fmt.Fprintf(h, "%s %o %d:%d %d %d %s\n", rel, st.Mode, st.Uid, st.Gid, st.Size, mt, link)
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// overlayOf mounts an overlay whose lower tree holds entries (unmounted
// when the test ends) and returns its directories.
func overlayOf(t *testing.T, entries ...entry) (base, lower, upper, merged string) {
	t.Helper()
	needRoot(t)
	base = t.TempDir()
	lower, upper, merged = filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "merged")
	work := filepath.Join(base, "work")
	for _, d := range []string{lower, upper, work, merged} {
		os.Mkdir(d, 0o755)
	}
	apply(t, lower, entries...)
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
	return base, lower, upper, merged
}

// TestDiffRoundTrip changes a real overlay's merged view, writes its upper
// directory as a layer and applies that layer to a clone of the lower tree:
// the result must equal the merged view.
func TestDiffRoundTrip(t *testing.T) {
	base, lower, upper, merged := overlayOf(t, entry{name: "etc/passwd", body: "root\n"}, entry{name: "etc/gone", body: "x"},
		entry{name: "var/cache/a", body: "a"}, entry{name: "var/cache/b", body: "b"}, entry{name: "usr/bin/tool", body: "t", mode: 0o755})
	script := `set -e
cd "$1"
echo 'root
user' > etc/passwd
rm etc/gone
rm -rf var/cache && mkdir var/cache && echo fresh > var/cache/new
chmod 4711 usr/bin/tool
mkdir -p opt/app && echo hi > opt/app/a && ln opt/app/a opt/app/b && ln -s /etc/passwd opt/app/l
mkfifo opt/app/fifo
mknod opt/app/mem c 1 1
mkdir -p opt/cubby/bin && touch opt/cubby/bin/cubby
chown -R 1000:1000 opt/app`
	if out, err := runSh(script, merged); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if err := unix.Setxattr(filepath.Join(merged, "opt/app/a"), "user.k", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	st, err := WriteDiff(context.Background(), upper, &buf, DiffOptions{Exclude: []string{"/opt/cubby"}})
	if err != nil {
		t.Fatal(err)
	}
	if st.Whiteout != 2 || st.Linked != 1 || st.Skipped != 2 {
		t.Errorf("diff stats %+v", st)
	}
	got := filepath.Join(base, "got")
	if _, err := Clone(context.Background(), lower, got); err != nil {
		t.Fatal(err)
	}
	apply2, err := Apply(context.Background(), got, &buf, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = apply2
	os.RemoveAll(filepath.Join(merged, "opt/cubby"))
	unix.Unlink(filepath.Join(merged, "opt/app/mem"))
	if a, b := list(t, got), list(t, merged); a != b {
		t.Fatalf("entries differ:\n got    %s\n merged %s", a, b)
	}
	if fingerprint(t, got) != fingerprint(t, merged) {
		t.Fatal("applied diff differs from the merged view")
	}
}

// TestDiffLowerSkipsCopiedUpDirs: directories the overlay merely copied up
// (to hold a file created and removed again, or a mount point) are left out
// when Lower is given, so such a sandbox yields an empty layer, while real
// directory changes (mode, new directories) are kept.
func TestDiffLowerSkipsCopiedUpDirs(t *testing.T) {
	_, lower, upper, merged := overlayOf(t, entry{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		entry{name: "var/lib/", typ: tar.TypeDir, mode: 0o755}, entry{name: "srv/", typ: tar.TypeDir, mode: 0o755})
	if out, err := runSh(`set -e; cd "$1"; touch etc/tmp var/lib/x; rm etc/tmp var/lib/x; mkdir -p opt/cubby/bin; touch opt/cubby/bin/cubby`, merged); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	diff := func() string {
		var buf bytes.Buffer
		if _, err := WriteDiff(context.Background(), upper, &buf, DiffOptions{Lower: lower, Exclude: []string{"/opt/cubby"}}); err != nil {
			t.Fatal(err)
		}
		var names []string
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			names = append(names, h.Name)
		}
		return strings.Join(names, " ")
	}
	if got := diff(); got != "opt/" {
		t.Fatalf("copy-up only changes gave %q, want only the new directory opt/", got)
	}
	os.Chmod(filepath.Join(merged, "srv"), 0o700)
	os.WriteFile(filepath.Join(merged, "var/lib/y"), []byte("y"), 0o644)
	if got := diff(); got != "opt/ srv/ var/ var/lib/ var/lib/y" {
		t.Fatalf("diff = %q", got)
	}
}

// BenchmarkClone clones a real root filesystem (CUBBY_BENCH_TREE, e.g. a
// template tree or the test Debian tree in .cache/test-images) as a build
// step does before applying its layer.
func BenchmarkClone(b *testing.B) {
	src := os.Getenv("CUBBY_BENCH_TREE")
	if src == "" || os.Geteuid() != 0 {
		b.Skip("set CUBBY_BENCH_TREE to a tree and run as root")
	}
	base := b.TempDir()
	var st Stats
	for i := 0; i < b.N; i++ {
		dst := filepath.Join(base, fmt.Sprint(i))
		var err error
		if st, err = Clone(context.Background(), src, dst); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
	b.ReportMetric(float64(st.Entries), "entries")
}
