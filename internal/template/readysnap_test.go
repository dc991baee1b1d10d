package template

import (
	"context"
	"slices"
	"testing"
)

func TestReadySnapshotID(t *testing.T) {
	id := ReadySnapshotID("0B699E8A-88dc-4779-867d-39d7e34a522d")
	if id != "tmpl0b699e8a88dc4779867d39d7e34a522d" || !IsReadySnapshot(id) {
		t.Errorf("ReadySnapshotID = %q", id)
	}
	for _, bad := range []string{"", "abc", "../../etc", "0b699e8a-88dc-4779-867d-39d7e34a522d-00"} {
		if got := ReadySnapshotID(bad); got != "" {
			t.Errorf("ReadySnapshotID(%q) = %q, want none", bad, got)
		}
	}
	if IsReadySnapshot("abcdefghij0123456789") {
		t.Error("a sandbox snapshot ID counts as a ready snapshot")
	}
}

// TestReadySnapshotLife: a build's ready snapshot is recorded with it and
// kept on every tag pointing at it (AssignTags too); PruneReadySnapshots
// drops the ones no tag points at (a rebuild moved the tags, a delete) and
// never a sandbox snapshot.
func TestReadySnapshotLife(t *testing.T) {
	m := newManager(t)
	ctx := context.Background()
	a := fakeBuild(t, m, "srv", nil, []string{DefaultTag}, "one")
	snap := ReadySnapshotID(a.BuildID)
	d, err := m.descriptor(a)
	if err != nil {
		t.Fatal(err)
	}
	err = m.publish(ctx, publication{ID: a.ID, Name: a.Name, BuildID: a.BuildID, Manifest: d, Tree: mustHash(a.RootfsDir),
		SizeBytes: a.SizeBytes, Tags: []string{DefaultTag}, Ready: &readySnap{ID: snap, Runtime: "runsc"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AssignTags(ctx, "srv", []string{"v1"}); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"srv", "srv:v1"} {
		if got, err := m.Get(ref); err != nil || got.Snapshot != snap || got.SnapshotRuntime != "runsc" {
			t.Fatalf("Get(%s) = %+v, %v", ref, got, err)
		}
	}
	orphan := ReadySnapshotID(NewBuildID())
	userSnap := "abcdefghij0123456789"
	var dropped []string
	drop := func(_ context.Context, id string) error { dropped = append(dropped, id); return nil }
	if n, err := m.PruneReadySnapshots(ctx, []string{snap, orphan, userSnap}, drop); err != nil || n != 1 || !slices.Equal(dropped, []string{orphan}) {
		t.Fatalf("prune with the build tagged: %d %v, dropped %v", n, err, dropped)
	}
	fakeBuild(t, m, "srv", nil, []string{DefaultTag}, "two") // a rebuild: "v1" still points at a
	dropped = nil
	if n, err := m.PruneReadySnapshots(ctx, []string{snap}, drop); err != nil || n != 0 {
		t.Fatalf("prune with one tag left: %d %v, dropped %v", n, err, dropped)
	}
	if err := m.Delete(ctx, "srv"); err != nil {
		t.Fatal(err)
	}
	if n, err := m.PruneReadySnapshots(ctx, []string{snap, userSnap}, drop); err != nil || n != 1 || !slices.Equal(dropped, []string{snap}) {
		t.Fatalf("prune after delete: %d %v, dropped %v", n, err, dropped)
	}
	if live, err := m.ReadySnapshots(); err != nil || len(live) != 0 {
		t.Errorf("ReadySnapshots after delete = %v, %v", live, err)
	}
}
