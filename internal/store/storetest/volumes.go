package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

func vol(id, team, name string) store.Volume {
	return store.Volume{ID: id, Team: team, Name: name, Token: "tok-" + id, SizeBytes: 64 << 20,
		CreatedAt: time.UnixMilli(1_700_000_000_456).UTC()}
}

func testVolumes(t *testing.T, s Store) {
	ctx := context.Background()
	for _, v := range []store.Volume{vol("v1", "t1", "data"), vol("v2", "t1", "Cache"), vol("v3", "t2", "data")} {
		if err := s.InsertVolume(ctx, v); err != nil {
			t.Fatalf("insert %s: %v", v.ID, err)
		}
	}
	if err := s.InsertVolume(ctx, vol("v4", "t1", "data")); !errors.Is(err, store.ErrExists) {
		t.Fatalf("duplicate name in a team: %v, want ErrExists", err)
	}
	want := vol("v1", "t1", "data")
	if got, err := s.GetVolume(ctx, "v1"); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("get v1: %+v, %v; want %+v", got, err, want)
	}
	for _, ref := range []string{"v1", "data"} {
		if got, err := s.FindVolume(ctx, "t1", ref); err != nil || got.ID != "v1" {
			t.Fatalf("find %q in t1: %+v, %v", ref, got, err)
		}
	}
	if got, err := s.FindVolume(ctx, "t2", "data"); err != nil || got.ID != "v3" {
		t.Fatalf("find data in t2: %+v, %v", got, err)
	}
	if _, err := s.FindVolume(ctx, "t2", "v1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another team's volume found by ID: %v", err)
	}
	if _, err := s.GetVolume(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	checkVolumes(t, s, "t1", "v2", "v1") // by name in byte order: "Cache" < "data"
	checkVolumes(t, s, "", "v2", "v1", "v3")
	if err := s.DeleteVolume(ctx, "t2", "v1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete of another team's volume: %v", err)
	}
	if err := s.DeleteVolume(ctx, "t1", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertVolume(ctx, vol("v5", "t1", "data")); err != nil {
		t.Fatalf("name reused after delete: %v", err)
	}
	checkVolumes(t, s, "t1", "v2", "v5")
}

func checkVolumes(t *testing.T, s Store, team string, want ...string) {
	t.Helper()
	got, err := s.ListVolumes(context.Background(), team)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range got {
		ids = append(ids, v.ID)
	}
	if !reflect.DeepEqual(ids, want) {
		t.Fatalf("ListVolumes(%q) = %v, want %v", team, ids, want)
	}
}

func testSandboxVolumeMounts(t *testing.T, s Store) {
	ctx := context.Background()
	in := Rec("m1", time.UnixMilli(1_700_000_000_000).UTC(), nil)
	in.VolumeMounts = []store.VolumeMount{{Name: "data", Path: "/mnt/data"}, {Name: "cache", Path: "/home/user/.cache"}}
	insert(t, s, in, Rec("m2", time.UnixMilli(1_700_000_000_000).UTC(), nil))
	got, err := s.GetSandbox(ctx, "m1")
	if err != nil || !reflect.DeepEqual(got.VolumeMounts, in.VolumeMounts) {
		t.Fatalf("mounts read back as %+v, %v; want %+v", got.VolumeMounts, err, in.VolumeMounts)
	}
	if got, _ := s.GetSandbox(ctx, "m2"); got.VolumeMounts != nil {
		t.Fatalf("no mounts read back as %#v, want nil", got.VolumeMounts)
	}
	if err := s.MarkKilled(ctx, "m1", time.Now(), "killed"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "m1"); !reflect.DeepEqual(got.VolumeMounts, in.VolumeMounts) {
		t.Fatalf("a killed sandbox's mounts read back as %+v", got.VolumeMounts)
	}
}
