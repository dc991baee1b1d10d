package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestSecretRecords(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	a := Secret{ID: "sec_a", Team: "acme", Name: "openai", Metadata: map[string]string{"env": "prod"},
		Version: 1, Sealed: []byte("sealed-a-1"), CreatedAt: now, UpdatedAt: now}
	if err := s.InsertSecret(ctx, a); err != nil {
		t.Fatal(err)
	}
	dup := a
	dup.ID = "sec_b"
	if err := s.InsertSecret(ctx, dup); !errors.Is(err, ErrConflict) {
		t.Fatalf("same name in the same team: %v", err)
	}
	other := a
	other.ID, other.Team = "sec_c", "globex"
	if err := s.InsertSecret(ctx, other); err != nil {
		t.Fatalf("same name in another team: %v", err)
	}
	for _, key := range []string{"sec_a", "OpenAI"} {
		got, err := s.GetSecret(ctx, "acme", key)
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Fatalf("GetSecret(%q) = %+v, %v", key, got, err)
		}
	}
	if _, err := s.GetSecret(ctx, "globex", "sec_a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another team's secret by ID: %v", err)
	}
	upd, err := s.UpdateSecret(ctx, "acme", "sec_a", []byte("sealed-a-2"), nil, now.Add(time.Second))
	if err != nil || upd.Version != 2 || string(upd.Sealed) != "sealed-a-2" || upd.Metadata["env"] != "prod" {
		t.Fatalf("UpdateSecret = %+v, %v", upd, err)
	}
	if _, err := s.UpdateSecret(ctx, "globex", "sec_a", nil, nil, now); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update another team's secret: %v", err)
	}
	list, err := s.ListSecrets(ctx, "acme", "", 10)
	if err != nil || len(list) != 1 || list[0].ID != "sec_a" {
		t.Fatalf("ListSecrets = %+v, %v", list, err)
	}
	if err := s.DeleteSecret(ctx, "globex", "sec_a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete another team's secret: %v", err)
	}
	if err := s.DeleteSecret(ctx, "acme", "sec_a"); err != nil {
		t.Fatal(err)
	}
	if err := s.TruncateWAL(ctx); err != nil {
		t.Fatal(err)
	}
	if f := fileHolds(t, path, "sealed-a-2"); f != "" {
		t.Fatalf("a deleted secret's sealed value is still in %s", f)
	}
}

func TestSetNetworkAndKillDropsCredentials(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	if err := s.InsertSandbox(ctx, rec("n1", time.Now(), nil)); err != nil {
		t.Fatal(err)
	}
	off := false
	if err := s.SetNetwork(ctx, "n1", &off, []byte(`{"denyOut":["0.0.0.0/0"]}`), []byte("sealed-proxy-pw-9c2")); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "n1")
	if err != nil || got.AllowInternetAccess == nil || *got.AllowInternetAccess || string(got.Network) != `{"denyOut":["0.0.0.0/0"]}` {
		t.Fatalf("after SetNetwork: %+v %v", got, err)
	}
	if sealed, err := s.NetworkSecret(ctx, "n1"); err != nil || string(sealed) != "sealed-proxy-pw-9c2" {
		t.Fatalf("NetworkSecret = %q, %v", sealed, err)
	}
	if err := s.MarkKilled(ctx, "n1", time.Now(), "killed by request"); err != nil {
		t.Fatal(err)
	}
	if err := s.TruncateWAL(ctx); err != nil {
		t.Fatal(err)
	}
	if sealed, err := s.NetworkSecret(ctx, "n1"); err != nil || sealed != nil {
		t.Fatalf("killed sandbox keeps credentials %q (%v)", sealed, err)
	}
	if f := fileHolds(t, path, "sealed-proxy-pw-9c2"); f != "" {
		t.Fatalf("killed sandbox's credentials still in %s", f)
	}
	if err := s.SetNetwork(ctx, "n1", nil, nil, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetNetwork on a killed sandbox: %v", err)
	}
}
