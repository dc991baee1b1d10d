package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

func build(id, templateID, team string, created time.Time) store.TemplateBuild {
	return store.TemplateBuild{ID: id, TemplateID: templateID, Team: team, Name: "tpl-" + templateID,
		Tags: []string{"latest", "v1"}, Status: store.BuildWaiting, CPUCount: 2, MemoryMB: 1024,
		CreatedAt: created, UpdatedAt: created}
}

func insertBuild(t *testing.T, s Store, b store.TemplateBuild) {
	t.Helper()
	if err := s.InsertTemplateBuild(context.Background(), b); err != nil {
		t.Fatalf("insert build %s: %v", b.ID, err)
	}
}

func testTemplateBuilds(t *testing.T, s Store) {
	ctx := context.Background()
	at := time.UnixMilli(1_700_000_000_789).UTC()
	in := build("b1", "tplA", "t1", at)
	insertBuild(t, s, in)
	if got, err := s.GetTemplateBuild(ctx, "b1"); err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, in)
	}
	noTags := build("b2", "tplA", "t2", at.Add(time.Second))
	noTags.Tags = nil
	insertBuild(t, s, noTags)
	if got, _ := s.GetTemplateBuild(ctx, "b2"); got.Tags == nil || len(got.Tags) != 0 {
		t.Fatalf("nil tags read back as %#v, want []", got.Tags)
	}
	insertBuild(t, s, build("b3", "tplB", "t2", at))
	if err := s.InsertTemplateBuild(ctx, in); err == nil {
		t.Fatal("duplicate build ID accepted")
	}
	if _, err := s.GetTemplateBuild(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
	list, err := s.ListTemplateBuilds(ctx, "tplA")
	if err != nil || len(list) != 2 || list[0].ID != "b2" || list[1].ID != "b1" {
		t.Fatalf("ListTemplateBuilds(tplA) = %+v, %v; want b2, b1", list, err)
	}
	if team, ok, err := s.TemplateBuildTeam(ctx, "tplA"); err != nil || !ok || team != "t1" {
		t.Fatalf("TemplateBuildTeam(tplA) = %q, %v, %v; want the first build's team t1", team, ok, err)
	}
	if _, ok, err := s.TemplateBuildTeam(ctx, "tplC"); err != nil || ok {
		t.Fatalf("TemplateBuildTeam(tplC) = %v, %v; want none", ok, err)
	}
	for i, want := range []bool{true, false} {
		if ok, err := s.StartTemplateBuild(ctx, "b1"); err != nil || ok != want {
			t.Fatalf("start #%d: %v, %v; want %v (a build starts once)", i+1, ok, err, want)
		}
	}
	if ok, err := s.StartTemplateBuild(ctx, "nope"); err != nil || ok {
		t.Fatalf("start unknown: %v, %v", ok, err)
	}
	if got, _ := s.GetTemplateBuild(ctx, "b1"); !got.Started || got.UpdatedAt.Before(at) {
		t.Fatalf("after start: %+v", got)
	}
	testTemplateUsage(t, s)
}

func testTemplateUsage(t *testing.T, s Store) {
	ctx := context.Background()
	if n, last, err := s.TemplateUsage(ctx, "tplX"); err != nil || n != 0 || !last.IsZero() {
		t.Fatalf("usage of an unused template: %d, %v, %v", n, last, err)
	}
	early, late := time.UnixMilli(1_700_000_000_000).UTC(), time.UnixMilli(1_700_000_100_000).UTC()
	a, b := Rec("u1", early, nil), Rec("u2", late, nil)
	a.TemplateID, b.TemplateID = "tplX", "tplX"
	insert(t, s, a, b, Rec("u3", late.Add(time.Hour), nil))
	if err := s.MarkKilled(ctx, "u2", time.Now(), "killed"); err != nil {
		t.Fatal(err)
	}
	if n, last, err := s.TemplateUsage(ctx, "tplX"); err != nil || n != 2 || !last.Equal(late) {
		t.Fatalf("usage: %d, %v, %v; want 2 sandboxes (killed ones count), last started %v", n, last, err, late)
	}
}

func testTemplateBuildStatus(t *testing.T, s Store) {
	ctx := context.Background()
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond).UTC()
	for _, id := range []string{"w", "b", "r", "e"} {
		insertBuild(t, s, build(id, "tpl"+id, "t1", at))
	}
	if err := s.SetTemplateBuildStatus(ctx, "b", store.BuildBuilding, "", ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetTemplateBuild(ctx, "b"); got.Status != store.BuildBuilding || !got.FinishedAt.IsZero() {
		t.Fatalf("building: %+v", got)
	}
	if err := s.SetTemplateBuildStatus(ctx, "r", store.BuildReady, "", ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetTemplateBuild(ctx, "r"); got.Status != store.BuildReady || got.FinishedAt.Before(at) {
		t.Fatalf("ready without a finish time: %+v", got)
	}
	if err := s.SetTemplateBuildStatus(ctx, "e", store.BuildError, "exit status 1", "3"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetTemplateBuild(ctx, "e"); got.Status != store.BuildError || got.Reason != "exit status 1" ||
		got.ReasonStep != "3" || got.FinishedAt.IsZero() {
		t.Fatalf("error: %+v", got)
	}
	if err := s.SetTemplateBuildStatus(ctx, "nope", store.BuildReady, "", ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("status of an unknown build: %v", err)
	}
	if err := s.SetTemplateBuildStatus(ctx, "w", "bogus", "", ""); err == nil {
		t.Fatal("a status outside waiting/building/ready/error was stored")
	}
	if n, err := s.FailUnfinishedTemplateBuilds(ctx, "server restarted"); err != nil || n != 2 {
		t.Fatalf("FailUnfinished = %d, %v; want 2 (waiting and building)", n, err)
	}
	for id, want := range map[string]store.BuildStatus{"w": store.BuildError, "b": store.BuildError, "r": store.BuildReady, "e": store.BuildError} {
		got, _ := s.GetTemplateBuild(ctx, id)
		if got.Status != want || (id == "w" || id == "b") && (got.Reason != "server restarted" || got.FinishedAt.IsZero()) {
			t.Errorf("build %s after FailUnfinished: %+v", id, got)
		}
	}
	if got, _ := s.GetTemplateBuild(ctx, "e"); got.Reason != "exit status 1" {
		t.Errorf("a finished build's reason changed: %q", got.Reason)
	}
}
