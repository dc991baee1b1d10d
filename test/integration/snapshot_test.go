package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/runc"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// snapshotsDir is where the server keeps snapshots (local backend: <data>/snapshots).
func (s *server) snapshotsDir() string { return filepath.Join(s.DataDir, "snapshots") }

// snapshotEntries lists the snapshot directories the backend holds.
func (s *server) snapshotEntries(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(s.snapshotsDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// waitNoSnapshots waits until the backend holds no snapshot data.
func (s *server) waitNoSnapshots(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(s.snapshotEntries(t)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("snapshot data left behind: %v", s.snapshotEntries(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
	Mode       string   `json:"mode"`
	SizeBytes  int64    `json:"sizeBytes"`
	SandboxID  string   `json:"sandboxID"`
}

func (s *server) snapshot(t *testing.T, id string, body map[string]any) snapshotInfo {
	t.Helper()
	var out snapshotInfo
	if code := s.api("POST", "/sandboxes/"+id+"/snapshots", body, &out); code != 201 {
		t.Fatalf("snapshot %s: status %d\n%s", id, code, s.log())
	}
	return out
}

// prepareSource writes what the snapshot tests look for: new files (one of
// 8 MiB), a deleted template file (a whiteout) and a replaced template
// directory (opaque).
func prepareSource(ctx context.Context, t *testing.T, sb *sandbox) {
	t.Helper()
	sb.mustRun(ctx, t, `set -e; mkdir -p /home/user/proj; echo v1 > /home/user/proj/a.txt
		head -c 8M /dev/urandom > /home/user/big; sha256sum /home/user/big > /home/user/big.sum`, "")
	if out, code := sb.runAs(ctx, t, "root", "set -e; rm /etc/os-release; rm -rf /etc/apt; mkdir /etc/apt; echo only > /etc/apt/only"); code != 0 {
		t.Fatalf("as root: %d %q", code, out)
	}
}

// checkCopy fails unless sb sees what prepareSource wrote.
func checkCopy(ctx context.Context, t *testing.T, sb *sandbox) {
	t.Helper()
	sb.mustRun(ctx, t, `cat /home/user/proj/a.txt; sha256sum -c --quiet /home/user/big.sum && echo sum-ok
		test -e /etc/os-release || echo no-os-release; ls /etc/apt`, "v1\nsum-ok\nno-os-release\nonly\n")
}

func TestSnapshotRunc(t *testing.T) { snapshotFlow(t, startServer(t), "filesystem") }

// TestSnapshotGVisor: the same under gVisor, where a snapshot holds memory
// and processes too: its record says "full".
func TestSnapshotGVisor(t *testing.T) {
	runscBinary(t)
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbit", Args: []string{"--runtime", "runsc"}})
	snapshotFlow(t, &server{Server: ts, t: t}, "full")
}

// snapshotFlow: a named snapshot of a sandbox that wrote files, deleted a
// template file and replaced a template directory; three sandboxes from it
// see exactly that and write independently; list, delete, 404 after delete,
// data kept while used and removed after. mode is the records' mode.
func snapshotFlow(t *testing.T, s *server, mode string) {
	ctx := context.Background()
	src := s.create(t, nil)
	prepareSource(ctx, t, src)
	snap := s.snapshot(t, src.ID, map[string]any{"name": "snap1"})
	if snap.Mode != mode || snap.SizeBytes < 8<<20 || len(snap.Names) != 1 || snap.Names[0] != snap.SnapshotID {
		t.Fatalf("snapshot record %+v: want mode %s, the 8 MiB it holds, its name", snap, mode)
	}
	src.mustRun(ctx, t, "echo after > /home/user/proj/b.txt && cat /home/user/proj/b.txt", "after\n")

	var kids []*sandbox
	for range 3 {
		kid := s.create(t, map[string]any{"templateID": snap.SnapshotID})
		checkCopy(ctx, t, kid)
		kid.mustRun(ctx, t, "test -e /home/user/proj/b.txt || echo absent", "absent\n")
		kids = append(kids, kid)
	}
	kids[0].mustRun(ctx, t, "echo mine > /home/user/proj/a.txt", "")
	kids[1].mustRun(ctx, t, "cat /home/user/proj/a.txt", "v1\n")
	src.mustRun(ctx, t, "cat /home/user/proj/a.txt", "v1\n")

	checkSnapshotList(t, s, src.ID, snap)
	esc := "/templates/" + url.PathEscape(snap.SnapshotID)
	if code := s.api("DELETE", esc, nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete snapshot: %d", code)
	}
	if code := s.api("DELETE", esc, nil, nil); code != http.StatusNotFound {
		t.Fatalf("second delete: %d, want 404", code)
	}
	if code := s.api("POST", "/v2/sandboxes", map[string]any{"templateID": snap.SnapshotID}, nil); code != http.StatusNotFound {
		t.Fatalf("create from deleted snapshot: %d, want 404", code)
	}
	checkCopy(ctx, t, kids[2]) // its data stays while sandboxes use it
	for _, kid := range kids {
		if code := s.api("DELETE", "/sandboxes/"+kid.ID, nil, nil); code != http.StatusNoContent {
			t.Fatalf("kill %s: %d", kid.ID, code)
		}
	}
	s.waitNoSnapshots(t)
}

// checkSnapshotList checks GET /snapshots with its filters and pages.
func checkSnapshotList(t *testing.T, s *server, srcID string, named snapshotInfo) {
	t.Helper()
	second := s.snapshot(t, srcID, nil)
	if len(second.Names) != 0 || !strings.HasSuffix(second.SnapshotID, ":default") {
		t.Fatalf("unnamed snapshot %+v", second)
	}
	var all []snapshotInfo
	if code := s.api("GET", "/snapshots?sandboxID="+srcID, nil, &all); code != 200 || len(all) != 2 || all[0].SnapshotID != second.SnapshotID {
		t.Fatalf("list: %d %+v, want both, newest first", code, all)
	}
	var byName []snapshotInfo
	if code := s.api("GET", "/snapshots?name=snap1", nil, &byName); code != 200 || len(byName) != 1 || byName[0].SnapshotID != named.SnapshotID {
		t.Fatalf("list by name: %d %+v", code, byName)
	}
	resp, body, err := s.Call(context.Background(), s.Key, "GET", "/snapshots?limit=1", nil)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Next-Token") == "" {
		t.Fatalf("page 1: %v %v %s", err, resp.Header, body)
	}
	var page2 []snapshotInfo
	if code := s.api("GET", "/snapshots?limit=1&nextToken="+resp.Header.Get("X-Next-Token"), nil, &page2); code != 200 || len(page2) != 1 || page2[0].SnapshotID != named.SnapshotID {
		t.Fatalf("page 2: %d %+v", code, page2)
	}
	if code := s.api("DELETE", "/templates/"+url.PathEscape(second.SnapshotID), nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete unnamed snapshot: %d", code)
	}
}

func TestForkRunc(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	src := s.create(t, map[string]any{"envVars": map[string]string{"FORK_ENV": "inherited"}})
	prepareSource(ctx, t, src)
	for _, n := range []int{0, 101} {
		if code := s.api("POST", "/sandboxes/"+src.ID+"/fork", map[string]any{"count": n}, nil); code != http.StatusBadRequest {
			t.Fatalf("fork count %d: %d, want 400", n, code)
		}
	}
	var res []struct {
		Sandbox map[string]any `json:"sandbox"`
		Error   map[string]any `json:"error"`
	}
	if code := s.api("POST", "/sandboxes/"+src.ID+"/fork", map[string]any{"count": 5, "timeout": 120}, &res); code != 201 || len(res) != 5 {
		t.Fatalf("fork: %d %+v\n%s", code, res, s.log())
	}
	seen := map[string]bool{src.ID: true, src.Token: true}
	var forks []*sandbox
	for i, r := range res {
		if r.Error != nil || r.Sandbox == nil {
			t.Fatalf("fork %d: %+v", i, r.Error)
		}
		f := s.attach(t, r.Sandbox)
		for _, v := range []string{f.ID, f.Token} {
			if seen[v] || v == "" {
				t.Fatalf("fork %d shares or lacks an identity: %q", i, v)
			}
			seen[v] = true
		}
		checkCopy(ctx, t, f)
		f.mustRun(ctx, t, fmt.Sprintf("echo $FORK_ENV; echo %d > /home/user/proj/a.txt; hostname", i), "inherited\n"+f.ID+"\n")
		forks = append(forks, f)
	}
	for i, f := range forks {
		f.mustRun(ctx, t, "cat /home/user/proj/a.txt", fmt.Sprintf("%d\n", i))
	}
	src.mustRun(ctx, t, "cat /home/user/proj/a.txt", "v1\n")
	var listed []snapshotInfo
	if code := s.api("GET", "/snapshots", nil, &listed); code != 200 || len(listed) != 0 {
		t.Fatalf("a fork's capture is listed: %+v", listed)
	}
	for _, f := range forks {
		s.api("DELETE", "/sandboxes/"+f.ID, nil, nil)
	}
	s.waitNoSnapshots(t)
}

// TestSnapshotCrashLeftovers: what a crash leaves of a capture (a staging
// directory, or a complete capture never recorded in the store) is removed
// at the next start; recorded snapshots survive it.
func TestSnapshotCrashLeftovers(t *testing.T) {
	s := startServer(t)
	ctx := context.Background()
	src := s.create(t, nil)
	prepareSource(ctx, t, src)
	kept := s.snapshot(t, src.ID, map[string]any{"name": "kept"})
	entries := s.snapshotEntries(t)
	if len(entries) != 1 {
		t.Fatalf("snapshot dirs %v", entries)
	}
	s.kill9()
	dir := s.snapshotsDir()
	if err := os.MkdirAll(filepath.Join(dir, ".tmp-partial"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "unrecorded"), os.DirFS(filepath.Join(dir, entries[0]))); err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(dir, "unrecorded", "snapshot.json")
	data, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rec, []byte(strings.ReplaceAll(string(data), entries[0], "unrecorded")), 0o600); err != nil {
		t.Fatal(err)
	}
	s.restart()
	if got := s.snapshotEntries(t); len(got) != 1 || got[0] != entries[0] {
		t.Fatalf("after restart: %v, want only %s", got, entries[0])
	}
	kid := s.create(t, map[string]any{"templateID": kept.SnapshotID})
	checkCopy(ctx, t, kid)
}

// TestSnapshotDiskFull: a snapshot that runs out of disk fails cleanly: no
// capture is left behind and the source runs on, its disk thawed (it writes).
func TestSnapshotDiskFull(t *testing.T) {
	e := newBackendEnv(t, "cbf", true, func(root string, log *slog.Logger) runtime.Runtime {
		return runc.New(repoBinary(t, "runc", "CUBBY_RUNC"), root, log)
	})
	snaps := filepath.Join(e.dir, "snapshots")
	if err := unix.Mount("tmpfs", snaps, "tmpfs", 0, "size=4m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(snaps, unix.MNT_DETACH) })
	src := mustCreateT(t, e)
	execIn(t, src.proc, "head -c 16M /dev/urandom > /home/user/big && sync")
	if _, err := e.b.Snapshot(context.Background(), src.id, "full"+randHex(4)); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("snapshot onto a full disk: %v, want ENOSPC", err)
	}
	if entries, _ := os.ReadDir(snaps); len(entries) != 0 {
		t.Fatalf("left behind: %v", entries)
	}
	if out := execIn(t, src.proc, "echo still > /home/user/after && cat /home/user/after"); out != "still\n" {
		t.Fatalf("source after the failed snapshot: %q", out)
	}
}
