package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

// SealedSecret is the sealed value testSecretRecords leaves in the store as
// the last version of a deleted secret; stores check their files lost it.
const SealedSecret = "sealed-a-2"

// SealedNetwork is the sealed network credential testSetNetwork leaves on a
// killed sandbox; stores check their files lost it.
const SealedNetwork = "sealed-proxy-pw-9c2"

func testSecretRecords(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	a := store.Secret{ID: "sec_a", Team: "acme", Name: "openai", Metadata: map[string]string{"env": "prod"},
		Version: 1, Sealed: []byte("sealed-a-1"), CreatedAt: now, UpdatedAt: now}
	if err := s.InsertSecret(ctx, a); err != nil {
		t.Fatal(err)
	}
	dup := a
	dup.ID = "sec_b"
	if err := s.InsertSecret(ctx, dup); !errors.Is(err, store.ErrConflict) {
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
	if _, err := s.GetSecret(ctx, "globex", "sec_a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another team's secret by ID: %v", err)
	}
	upd, err := s.UpdateSecret(ctx, "acme", "sec_a", []byte(SealedSecret), nil, now.Add(time.Second))
	if err != nil || upd.Version != 2 || string(upd.Sealed) != SealedSecret || upd.Metadata["env"] != "prod" {
		t.Fatalf("UpdateSecret = %+v, %v", upd, err)
	}
	upd, err = s.UpdateSecret(ctx, "acme", "sec_a", []byte(SealedSecret), map[string]string{}, now.Add(time.Second))
	if err != nil || upd.Version != 3 || len(upd.Metadata) != 0 {
		t.Fatalf("UpdateSecret with empty metadata = %+v, %v", upd, err)
	}
	if _, err := s.UpdateSecret(ctx, "globex", "sec_a", nil, nil, now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update another team's secret: %v", err)
	}
	testListSecrets(t, s)
	if err := s.DeleteSecret(ctx, "globex", "sec_a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("delete another team's secret: %v", err)
	}
	if err := s.DeleteSecret(ctx, "acme", "sec_a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSecret(ctx, "acme", "sec_a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted secret: %v", err)
	}
	if err := s.TruncateWAL(ctx); err != nil {
		t.Fatal(err)
	}
}

// testListSecrets pages through acme's secrets by name (byte order).
func testListSecrets(t *testing.T, s Store) {
	ctx := context.Background()
	for _, name := range []string{"b_key", "Z_upper", "a_key"} {
		if err := s.InsertSecret(ctx, store.Secret{ID: "sec_" + name, Team: "acme", Name: name, Version: 1,
			Sealed: []byte("x"), CreatedAt: time.Now(), UpdatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	var names []string
	after := ""
	for {
		page, err := s.ListSecrets(ctx, "acme", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, sec := range page {
			names = append(names, sec.Name)
		}
		after = page[len(page)-1].Name
	}
	if want := []string{"Z_upper", "a_key", "b_key", "openai"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("secret names by page = %v, want %v", names, want)
	}
	for _, name := range []string{"b_key", "Z_upper", "a_key"} {
		if err := s.DeleteSecret(ctx, "acme", "sec_"+name); err != nil {
			t.Fatal(err)
		}
	}
}

func testSetNetwork(t *testing.T, s Store) {
	ctx := context.Background()
	insert(t, s, Rec("n1", time.Now(), nil))
	off := false
	if err := s.SetNetwork(ctx, "n1", &off, []byte(`{"denyOut":["0.0.0.0/0"]}`), []byte(SealedNetwork)); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "n1")
	if err != nil || got.AllowInternetAccess == nil || *got.AllowInternetAccess || string(got.Network) != `{"denyOut":["0.0.0.0/0"]}` {
		t.Fatalf("after SetNetwork: %+v %v", got, err)
	}
	if sealed, err := s.NetworkSecret(ctx, "n1"); err != nil || string(sealed) != SealedNetwork {
		t.Fatalf("NetworkSecret = %q, %v", sealed, err)
	}
	if _, err := s.NetworkSecret(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("NetworkSecret of an unknown sandbox: %v", err)
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
	if err := s.SetNetwork(ctx, "n1", nil, nil, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SetNetwork on a killed sandbox: %v", err)
	}
}
