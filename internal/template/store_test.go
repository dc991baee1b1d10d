package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// stageTree creates a staged tree (rootfs with one file) as a build would leave it.
func stageTree(t *testing.T, m *Manager, content string) string {
	t.Helper()
	dir, err := os.MkdirTemp(t.TempDir(), "stage")
	if err != nil {
		t.Fatal(err)
	}
	// Stage inside m.dir so the rename stays on one filesystem, as Build does.
	tree := filepath.Join(m.dir, ".staging", filepath.Base(dir))
	write(t, filepath.Join(tree, "rootfs", "etc", "marker"), content, 0o644)
	return tree
}

func commitDef(t *testing.T, m *Manager, d Definition, content string) Info {
	t.Helper()
	d = d.withDefaults()
	digest, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	info, err := m.commit(context.Background(), d, IDFor(d.Name), digest, stageTree(t, m, content))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestStoreGetListPrune(t *testing.T) {
	m := NewManager(t.TempDir(), nil)
	if l, err := m.List(); err != nil || len(l) != 0 {
		t.Fatalf("empty List() = %v, %v", l, err)
	}
	alpha := Definition{Name: "alpha", Aliases: []string{"a1"}, Env: map[string]string{"K": "v"}}
	first := commitDef(t, m, alpha, "one")
	if first.ID != IDFor("alpha") || first.SizeBytes <= 0 || first.User != "user" || first.Env["K"] != "v" ||
		strings.Join(first.Aliases, ",") != "alpha,a1" {
		t.Fatalf("info = %+v", first)
	}
	if filepath.Base(filepath.Dir(first.RootfsDir)) != first.Digest {
		t.Fatalf("rootfs %s not under digest dir %s", first.RootfsDir, first.Digest)
	}
	for _, key := range []string{first.ID, "alpha", "a1"} {
		got, err := m.Get(key)
		if err != nil || got.RootfsDir != first.RootfsDir || !got.BuiltAt.Equal(first.BuiltAt) {
			t.Errorf("Get(%q) = %+v, %v", key, got, err)
		}
	}
	for _, key := range []string{"nope", "../alpha", ""} {
		if _, err := m.Get(key); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) err = %v, want ErrNotFound", key, err)
		}
	}

	// A forced rebuild with the same digest gets its own tree; the old one stays.
	second := commitDef(t, m, alpha, "two")
	if second.RootfsDir == first.RootfsDir || filepath.Base(filepath.Dir(second.RootfsDir)) != first.Digest+".2" {
		t.Fatalf("second rootfs %s", second.RootfsDir)
	}
	if got, _ := m.Get("alpha"); got.RootfsDir != second.RootfsDir {
		t.Fatalf("current not switched: %s", got.RootfsDir)
	}
	if b, err := os.ReadFile(filepath.Join(first.RootfsDir, "etc", "marker")); err != nil || string(b) != "one" {
		t.Fatalf("old tree changed: %q %v", b, err)
	}

	// cached() prefers the current tree and can switch back to an older one.
	if info, ok := m.cached(first.ID, first.Digest, nil); !ok || info.RootfsDir != second.RootfsDir {
		t.Fatalf("cached = %+v %v", info, ok)
	}

	// Other templates may not steal names or aliases.
	beta := Definition{Name: "beta", Aliases: []string{"a1"}}.withDefaults()
	dg, _ := beta.Digest()
	_, err := m.commit(context.Background(), beta, IDFor("beta"), dg, stageTree(t, m, "b"))
	if !errors.Is(err, ErrAliasTaken) {
		t.Fatalf("alias conflict err = %v", err)
	}
	commitDef(t, m, Definition{Name: "beta"}, "b")
	if l, err := m.List(); err != nil || len(l) != 2 || l[0].Name != "alpha" || l[1].Name != "beta" {
		t.Fatalf("List() = %+v, %v", l, err)
	}

	// Prune keeps current and in-use trees, removes the rest.
	removed, err := m.Prune(context.Background(), map[string]bool{first.RootfsDir: true})
	if err != nil || len(removed) != 0 {
		t.Fatalf("Prune(in use) = %v, %v", removed, err)
	}
	removed, err = m.Prune(context.Background(), nil)
	if err != nil || len(removed) != 1 || removed[0] != first.RootfsDir {
		t.Fatalf("Prune() = %v, %v", removed, err)
	}
	if _, err := os.Stat(first.RootfsDir); !os.IsNotExist(err) {
		t.Fatalf("old tree still there: %v", err)
	}
	if got, err := m.Get("a1"); err != nil || got.RootfsDir != second.RootfsDir {
		t.Fatalf("Get after prune = %+v, %v", got, err)
	}
}

func TestPruneStagingRespectsLocks(t *testing.T) {
	m := NewManager(t.TempDir(), nil)
	id := IDFor("gamma")
	stale := filepath.Join(m.stagingDir(), id+"-123")
	write(t, filepath.Join(stale, "tree", "x"), "x", 0o644)
	unlock, ok, err := m.tryLock(id)
	if err != nil || !ok {
		t.Fatalf("tryLock: %v %v", ok, err)
	}
	if _, err := m.Prune(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("staging dir of a running build removed: %v", err)
	}
	unlock()
	if _, err := m.Prune(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale staging dir kept: %v", err)
	}
}

func TestLockWaitsAndHonoursContext(t *testing.T) {
	m := NewManager(t.TempDir(), nil)
	unlock, err := m.lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.lock(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("lock with cancelled ctx = %v", err)
	}
	unlock()
	unlock2, err := m.lock(ctx, "x")
	if err != nil {
		t.Fatalf("free lock not taken: %v", err)
	}
	unlock2()
}

// TestRemoveTreeUnmounts mounts a real tmpfs inside a tree and checks removeTree
// detaches it instead of deleting through it.
func TestRemoveTreeUnmounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount")
	}
	dir := filepath.Join(t.TempDir(), "tree-t"+filepath.Base(t.TempDir()))
	mp := filepath.Join(dir, "rootfs", "proc")
	if err := os.MkdirAll(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mp, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mp, unix.MNT_DETACH) })
	mounts, err := mountsUnder(dir)
	if err != nil || len(mounts) != 1 || mounts[0] != mp {
		t.Fatalf("mountsUnder = %v, %v", mounts, err)
	}
	if err := removeTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("tree still there: %v", err)
	}
	if mounts, _ := mountsUnder(dir); len(mounts) != 0 {
		t.Fatalf("still mounted: %v", mounts)
	}
}

// TestBuildCachedUpdatesRuntime: a definition that changes only its runtime hits
// the cached tree (no mmdebstrap run) and the stored Info reports the new value.
func TestBuildCachedUpdatesRuntime(t *testing.T) {
	m := NewManager(t.TempDir(), nil)
	m.mmdebstrap = "/nonexistent/mmdebstrap" // a rebuild would fail
	first := commitDef(t, m, Definition{Name: "gamma"}, "g")
	if first.Runtime != "" {
		t.Fatalf("runtime = %q", first.Runtime)
	}
	for _, rt := range []string{"runsc", "runc", ""} {
		info, err := m.Build(context.Background(), Definition{Name: "gamma", Runtime: rt}, nil, false)
		if err != nil || info.Runtime != rt || info.RootfsDir != first.RootfsDir {
			t.Fatalf("Build(runtime %q) = %+v, %v", rt, info, err)
		}
		got, err := m.Get("gamma")
		if err != nil || got.Runtime != rt || got.Digest != first.Digest {
			t.Fatalf("Get after runtime %q = %+v, %v", rt, got, err)
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(first.RootfsDir))
	if len(entries) != 2 {
		t.Fatalf("tree dir holds %d entries, want rootfs + template.json", len(entries))
	}
}
