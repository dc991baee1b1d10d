package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cubby-dev/cubby/internal/image"
)

func newManager(t *testing.T) *Manager {
	t.Helper()
	m, err := NewManager(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fakeBuild publishes a build of name whose tree holds one file, as a real
// build would leave it (tree, one layer blob, config, manifest, index entry).
func fakeBuild(t *testing.T, m *Manager, name string, aliases []string, tags []string, content string) Info {
	t.Helper()
	ctx := context.Background()
	l, _, err := m.store.WriteLayer(ctx, func(w io.Writer) error { _, err := io.WriteString(w, content+strings.Repeat("\x00", 2048)); return err })
	if err != nil {
		t.Fatal(err)
	}
	chain := image.ChainID([]v1.Hash{l.DiffID})
	tree := m.treeDir(chain)
	write(t, filepath.Join(tree, "etc", "marker"), content, 0o644)
	cfg := v1.ConfigFile{OS: "linux", Config: v1.Config{User: "user", WorkingDir: "/home/user", Env: []string{"K=" + content},
		Labels: map[string]string{labelStartCmd: "serve " + content}}, RootFS: v1.RootFS{Type: "layers", DiffIDs: []v1.Hash{l.DiffID}}}
	cd, err := m.store.WriteJSON(ctx, cfg, types.OCIConfigJSON)
	if err != nil {
		t.Fatal(err)
	}
	md, err := m.store.WriteJSON(ctx, v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: cd, Layers: []v1.Descriptor{l.Descriptor()}}, types.OCIManifestSchema1)
	if err != nil {
		t.Fatal(err)
	}
	err = m.publish(ctx, publication{ID: IDFor(name), Name: name, Aliases: aliases, BuildID: NewBuildID(), Manifest: md,
		Tree: chain, SizeBytes: 42, CPUCount: 2, MemoryMB: 512, Tags: tags})
	if err != nil {
		t.Fatal(err)
	}
	info, err := m.Get(IDFor(name) + ":" + tags[0])
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func TestManagerRefs(t *testing.T) {
	m := newManager(t)
	if l, err := m.List(); err != nil || len(l) != 0 {
		t.Fatalf("empty List() = %v, %v", l, err)
	}
	v1b := fakeBuild(t, m, "alpha", []string{"a1"}, []string{"v1", DefaultTag}, "one")
	if v1b.User != "user" || v1b.Env["K"] != "one" || v1b.StartCmd != "serve one" || !v1b.Shippable ||
		!slices.Equal(v1b.Tags, []string{DefaultTag, "v1"}) || readFile(t, v1b.RootfsDir, "etc/marker") != "one" {
		t.Fatalf("info = %+v", v1b)
	}
	time.Sleep(10 * time.Millisecond)
	v2b := fakeBuild(t, m, "alpha", []string{"a1"}, []string{"v2"}, "two")
	for ref, want := range map[string]string{"alpha": "one", "a1": "one", IDFor("alpha"): "one", "alpha:v1": "one", "alpha:v2": "two", "a1:v2": "two"} {
		got, err := m.Get(ref)
		if err != nil || got.Env["K"] != want {
			t.Errorf("Get(%q) = %v, %v; want build %q", ref, got.Env, err, want)
		}
	}
	if _, err := m.Get("alpha:v3"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown tag: %v", err)
	}
	if id, err := m.AssignTags(context.Background(), "alpha:v2", []string{"prod"}); err != nil || id != v2b.BuildID {
		t.Fatalf("AssignTags = %s, %v", id, err)
	}
	if got, _ := m.Get("alpha:prod"); got.BuildID != v2b.BuildID {
		t.Errorf("prod points at %s", got.BuildID)
	}
	if err := m.RemoveTags(context.Background(), "alpha", []string{DefaultTag}); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("alpha"); got.BuildID != v2b.BuildID { // no default tag: the newest build
		t.Errorf("without a default tag alpha resolves to %s, want the newest %s", got.BuildID, v2b.BuildID)
	}
	if err := m.RemoveTags(context.Background(), "alpha", []string{"nope"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("removing an unknown tag: %v", err)
	}
	if _, err := m.SetPublic(context.Background(), "a1", true); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Get("alpha:v1"); !got.Public {
		t.Error("SetPublic did not apply to every tag")
	}
	checkAliasTaken(t, m)
	if err := m.Delete(context.Background(), "a1"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get("alpha"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v", err)
	}
	if err := m.Delete(context.Background(), "alpha"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v", err)
	}
}

func checkAliasTaken(t *testing.T, m *Manager) {
	t.Helper()
	d, _ := m.descriptor(mustGet(t, m, "alpha"))
	err := m.publish(context.Background(), publication{ID: IDFor("beta"), Name: "beta", Aliases: []string{"a1"},
		BuildID: NewBuildID(), Manifest: d, Tree: mustHash(mustGet(t, m, "alpha").RootfsDir), Tags: []string{DefaultTag}})
	if !errors.Is(err, ErrAliasTaken) {
		t.Errorf("publishing another template under alias a1: %v", err)
	}
}

func mustGet(t *testing.T, m *Manager, ref string) Info {
	t.Helper()
	info, err := m.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

func readFile(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLegacyTrees: trees of the earlier layout stay usable, read only, and
// a new build of the same name supersedes them.
func TestLegacyTrees(t *testing.T) {
	m := newManager(t)
	id := IDFor("base")
	tree := filepath.Join(m.dir, id, "0eeac879eb88f6ec230d0949cd249fed")
	write(t, filepath.Join(tree, "rootfs", "etc", "marker"), "legacy", 0o644)
	info, _ := json.Marshal(map[string]any{"id": id, "name": "base", "aliases": []string{"base", "base-v1"}, "digest": "0eeac879",
		"builtAt": time.Now(), "user": "user", "workdir": "/home/user", "env": map[string]string{"LANG": "C.UTF-8"}})
	write(t, filepath.Join(tree, legacyInfo), string(info), 0o644)
	if err := os.Symlink(filepath.Base(tree), filepath.Join(m.dir, id, legacyCurrent)); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"base", "base-v1", id} {
		got, err := m.Get(ref)
		if err != nil || got.RootfsDir != filepath.Join(tree, "rootfs") || got.Env["LANG"] != "C.UTF-8" || got.Shippable {
			t.Errorf("Get(%q) = %+v, %v", ref, got, err)
		}
	}
	if l, _ := m.List(); len(l) != 1 || l[0].Name != "base" {
		t.Errorf("List = %+v", l)
	}
	if err := m.Delete(context.Background(), "base"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("deleting a legacy template: %v", err)
	}
	fakeBuild(t, m, "base", nil, []string{DefaultTag}, "new")
	if got, _ := m.Get("base"); readFile(t, got.RootfsDir, "etc/marker") != "new" {
		t.Error("a new build does not supersede the legacy tree")
	}
	if l, _ := m.List(); len(l) != 1 || l[0].Tag != DefaultTag {
		t.Errorf("List after the new build = %+v", l)
	}
}

// TestPrune: unreferenced trees, blobs and cache entries go (once old
// enough); tagged builds' and in-use trees stay.
func TestPrune(t *testing.T) {
	m := newManager(t)
	keep := fakeBuild(t, m, "keep", nil, []string{DefaultTag}, "keep")
	gone := fakeBuild(t, m, "gone", nil, []string{DefaultTag}, "gone")
	used := fakeBuild(t, m, "used", nil, []string{DefaultTag}, "used")
	stray := filepath.Join(m.dir, "trees", strings.Repeat("ab", 32))
	write(t, filepath.Join(stray, "x"), "x", 0o644)
	sum := sha256.Sum256([]byte("k"))
	if err := m.cachePut(hex.EncodeToString(sum[:]), cacheEntry{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gone", "used"} {
		if err := m.Delete(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := m.Prune(context.Background(), nil, time.Hour); err != nil || len(res.Trees)+res.Blobs+res.Steps != 0 {
		t.Fatalf("prune of recent content removed %+v, %v", res, err)
	}
	res, err := m.Prune(context.Background(), map[string]bool{used.RootfsDir: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Trees, gone.RootfsDir) || !slices.Contains(res.Trees, stray) || len(res.Trees) != 2 || res.Steps != 1 || res.Blobs < 3 {
		t.Errorf("prune removed %+v", res)
	}
	for _, dir := range []string{keep.RootfsDir, used.RootfsDir} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("kept tree removed: %v", err)
		}
	}
	if got := mustGet(t, m, "keep"); readFile(t, got.RootfsDir, "etc/marker") != "keep" {
		t.Error("kept template broken")
	}
}

// TestNoWritesOnRead: a Manager on a directory it only reads writes nothing
// there (templates dirs may be shared with other servers).
func TestNoWritesOnRead(t *testing.T) {
	dir := t.TempDir()
	m, err := NewManager(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.List()
	m.Get("base")
	if _, err := m.Prune(context.Background(), nil, 0); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("reads wrote %v", entries)
	}
}

// TestMissingDirIsEmpty: a first start has no templates directory yet; the
// manager lists nothing and reports ErrNotFound, so the server builds the
// built-in template instead of failing (make quickstart on a fresh data dir).
func TestMissingDirIsEmpty(t *testing.T) {
	m, err := NewManager(filepath.Join(t.TempDir(), "templates"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := m.List(); err != nil || len(l) != 0 {
		t.Fatalf("List of a missing dir = %v, %v; want none, nil", l, err)
	}
	if _, err := m.Get("base"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing dir = %v; want ErrNotFound", err)
	}
}
