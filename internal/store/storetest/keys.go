package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

func testAPIKeys(t *testing.T, s Store) {
	ctx := context.Background()
	k := store.APIKey{ID: "k1", Name: "default", Hash: []byte{1, 2, 3}, Mask: "e2b_…abcd", CreatedAt: time.Now()}
	if err := s.InsertAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertAPIKey(ctx, store.APIKey{ID: "k2", Hash: []byte{1, 2, 3}, CreatedAt: time.Now()}); err == nil {
		t.Fatal("duplicate hash accepted")
	}
	if err := s.TouchAPIKey(ctx, "k1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchAPIKey(ctx, "missing", time.Now()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("touch missing: %v", err)
	}
	active, err := s.ActiveAPIKeys(ctx)
	if err != nil || len(active) != 1 || active[0].LastUsedAt.IsZero() || active[0].Team != store.DefaultTeam ||
		string(active[0].Hash) != string(k.Hash) || active[0].Mask != k.Mask {
		t.Fatalf("active = %+v, %v", active, err)
	}
	first := time.Now().Truncate(time.Millisecond)
	if err := s.RevokeAPIKey(ctx, "k1", first); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeAPIKey(ctx, "k1", first.Add(time.Hour)); err != nil {
		t.Fatalf("revoke again: %v", err)
	}
	if err := s.RevokeAPIKey(ctx, "missing", time.Now()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoke missing: %v", err)
	}
	active, _ = s.ActiveAPIKeys(ctx)
	all, _ := s.ListAPIKeys(ctx)
	if len(active) != 0 || len(all) != 1 || !all[0].Revoked() || !all[0].RevokedAt.Equal(first) {
		t.Fatalf("after revoke: active %d, all %+v", len(active), all)
	}
}

// testTeams: keys create their teams; a team lists only its own sandboxes.
func testTeams(t *testing.T, s Store) {
	ctx := context.Background()
	for i, k := range []store.APIKey{
		{ID: "k1", Name: "a", Hash: []byte{1}, CreatedAt: time.Now()},
		{ID: "k2", Name: "b", Team: "other", Hash: []byte{2}, CreatedAt: time.Now()},
		{ID: "k3", Name: "c", Team: "other", Hash: []byte{3}, CreatedAt: time.Now()},
	} {
		if err := s.InsertAPIKey(ctx, k); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
	teams, err := s.ListTeams(ctx)
	if err != nil || len(teams) != 2 || teams[0].Name != store.DefaultTeam || teams[1].Name != "other" {
		t.Fatalf("teams = %+v, %v", teams, err)
	}
	keys, _ := s.ActiveAPIKeys(ctx)
	if len(keys) != 3 || keys[0].Team != store.DefaultTeam || keys[1].Team != "other" || keys[2].Team != "other" {
		t.Fatalf("key teams = %+v", keys)
	}
	mine, theirs := Rec("s1", time.Now(), nil), Rec("s2", time.Now(), nil)
	theirs.Team = "other"
	insert(t, s, mine, theirs)
	for team, want := range map[string]string{store.DefaultTeam: "s1", "other": "s2"} {
		got, err := s.ListSandboxes(ctx, store.SandboxFilter{Team: team})
		if err != nil || len(got) != 1 || got[0].ID != want || got[0].Team != team {
			t.Errorf("team %s lists %+v, %v", team, got, err)
		}
	}
	if all, _ := s.ListSandboxes(ctx, store.SandboxFilter{}); len(all) != 2 {
		t.Errorf("unfiltered list = %d records", len(all))
	}
}
