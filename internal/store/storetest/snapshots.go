package storetest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

// snap is a snapshot record of team taken at created.
func snap(id, team, name string, created time.Time) store.Snapshot {
	return store.Snapshot{ID: id, Team: team, Name: name, SandboxID: "sbx-" + id, TemplateID: "tpl1",
		Mode: "filesystem", SizeBytes: 4096, CreatedAt: created}
}

func putSnap(t *testing.T, s Store, sn store.Snapshot) string {
	t.Helper()
	replaced, err := s.PutSnapshot(context.Background(), sn)
	if err != nil {
		t.Fatalf("put snapshot %s: %v", sn.ID, err)
	}
	return replaced
}

func testSnapshots(t *testing.T, s Store) {
	ctx := context.Background()
	at := time.UnixMilli(1_700_000_000_123).UTC()
	in := snap("s1", "t1", "nightly", at)
	in.SizeBytes, in.Mode = 1<<40, "full"
	if r := putSnap(t, s, in); r != "" {
		t.Fatalf("first put replaced %q", r)
	}
	for _, ref := range []string{"s1", "nightly"} {
		got, err := s.FindSnapshot(ctx, "t1", ref)
		if err != nil || !reflect.DeepEqual(got, in) {
			t.Fatalf("find %q: %+v, %v; want %+v", ref, got, err, in)
		}
	}
	if _, err := s.FindSnapshot(ctx, "t2", "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another team's snapshot found: %v", err)
	}
	// The same name in another team is its own; in the same team it replaces.
	putSnap(t, s, snap("s2", "t2", "nightly", at))
	if r := putSnap(t, s, snap("s3", "t1", "nightly", at.Add(time.Second))); r != "s1" {
		t.Fatalf("named put replaced %q, want s1", r)
	}
	if _, err := s.FindSnapshot(ctx, "t1", "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("replaced snapshot still there: %v", err)
	}
	// Unnamed snapshots do not collide; an ID wins over another's name.
	putSnap(t, s, snap("u1", "t1", "", at))
	putSnap(t, s, snap("u2", "t1", "", at))
	putSnap(t, s, snap("u3", "t1", "u1", at))
	if got, err := s.FindSnapshot(ctx, "t1", "u1"); err != nil || got.ID != "u1" {
		t.Fatalf("find u1: %+v, %v; want the snapshot with that ID", got, err)
	}
	if _, err := s.FindSnapshot(ctx, "t1", ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the empty name found an unnamed snapshot: %v", err)
	}
	ids, err := s.SnapshotIDs(ctx)
	slices.Sort(ids)
	if err != nil || !slices.Equal(ids, []string{"s2", "s3", "u1", "u2", "u3"}) {
		t.Fatalf("SnapshotIDs = %v, %v", ids, err)
	}
	if err := s.DeleteSnapshot(ctx, "t2", "s3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete of another team's snapshot: %v", err)
	}
	if err := s.DeleteSnapshot(ctx, "t1", "s3"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshot(ctx, "t1", "s3"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	testTemplateSnapshots(t, s)
}

func testTemplateSnapshots(t *testing.T, s Store) {
	ctx := context.Background()
	for _, sn := range []store.Snapshot{
		{ID: "a1", Team: "t1", TemplateID: "tmplA"}, {ID: "a2", Team: "t2", TemplateID: "tmplA"},
		{ID: "a3", Team: "t1", TemplateID: "tmplA", Internal: true}, {ID: "b1", Team: "t1", TemplateID: "tmplB"},
	} {
		sn.SandboxID, sn.Mode, sn.CreatedAt = "x", "filesystem", time.Now()
		putSnap(t, s, sn)
	}
	for tmpl, want := range map[string]int{"tmplA": 2, "tmplB": 1, "tmplC": 0} {
		if n, err := s.TemplateSnapshots(ctx, tmpl); err != nil || n != want {
			t.Errorf("TemplateSnapshots(%s) = %d, %v; want %d (internal ones not counted)", tmpl, n, err, want)
		}
	}
}

func testSnapshotListing(t *testing.T, s Store) {
	ctx := context.Background()
	at := time.UnixMilli(1_700_000_000_000).UTC()
	putSnap(t, s, snap("c", "t1", "", at))
	putSnap(t, s, snap("a", "t1", "named", at)) // same time: ordered by ID, descending
	putSnap(t, s, snap("b", "t1", "", at))
	putSnap(t, s, snap("d", "t1", "", at.Add(time.Second)))
	hidden := snap("e", "t1", "", at.Add(2*time.Second))
	hidden.Internal = true
	putSnap(t, s, hidden)
	putSnap(t, s, snap("f", "t2", "", at.Add(3*time.Second)))
	list := func(f store.SnapshotFilter) []string {
		t.Helper()
		got, err := s.ListSnapshots(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, sn := range got {
			ids = append(ids, sn.ID)
		}
		return ids
	}
	cases := []struct {
		f    store.SnapshotFilter
		want []string
	}{
		{store.SnapshotFilter{Team: "t1", Limit: 10}, []string{"d", "c", "b", "a"}},
		{store.SnapshotFilter{Team: "t1", Limit: 2}, []string{"d", "c"}},
		{store.SnapshotFilter{Team: "t1", Limit: 10, After: "c"}, []string{"b", "a"}},
		{store.SnapshotFilter{Team: "t1", Limit: 10, After: "nope"}, nil},
		{store.SnapshotFilter{Team: "t1", Limit: 10, SandboxID: "sbx-b"}, []string{"b"}},
		{store.SnapshotFilter{Team: "t1", Limit: 10, Name: "named"}, []string{"a"}},
		{store.SnapshotFilter{Team: "t1", Limit: 10, Name: "d"}, []string{"d"}},
		{store.SnapshotFilter{Team: "t2", Limit: 10}, []string{"f"}},
		{store.SnapshotFilter{Team: "t3", Limit: 10}, nil},
	}
	for _, c := range cases {
		if got := list(c.f); !slices.Equal(got, c.want) {
			t.Errorf("ListSnapshots(%+v) = %v, want %v", c.f, got, c.want)
		}
	}
}
