package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

func testIdempotency(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond).UTC()
	window := 24 * time.Hour
	put := func(r store.IdempotencyRecord) {
		t.Helper()
		if err := s.PutIdempotency(ctx, r, now.Add(-window)); err != nil {
			t.Fatal(err)
		}
	}
	in := store.IdempotencyRecord{Scope: "k1", Key: "req-1", Fingerprint: []byte{1, 2, 3}, SandboxID: "sbx1", CreatedAt: now}
	put(in)
	if got, err := s.GetIdempotency(ctx, "k1", "req-1", now.Add(-window)); err != nil || !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, in)
	}
	for _, q := range [][2]string{{"k2", "req-1"}, {"k1", "req-2"}} {
		if _, err := s.GetIdempotency(ctx, q[0], q[1], now.Add(-window)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get %v: %v, want ErrNotFound (keys are per scope)", q, err)
		}
	}
	if _, err := s.GetIdempotency(ctx, "k1", "req-1", now.Add(time.Second)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a record older than since found: %v", err)
	}
	again := in
	again.Fingerprint, again.SandboxID, again.CreatedAt = []byte{9}, "sbx2", now.Add(time.Second)
	put(again)
	if got, _ := s.GetIdempotency(ctx, "k1", "req-1", now.Add(-window)); !reflect.DeepEqual(got, again) {
		t.Fatalf("replaced record read back as %+v, want %+v", got, again)
	}
	old := store.IdempotencyRecord{Scope: "k1", Key: "old", Fingerprint: []byte{7}, SandboxID: "sbx0", CreatedAt: now.Add(-2 * window)}
	put(old)
	put(store.IdempotencyRecord{Scope: "k3", Key: "new", Fingerprint: []byte{8}, SandboxID: "sbx3", CreatedAt: now})
	if _, err := s.GetIdempotency(ctx, "k1", "old", time.Time{}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a record created before expired survived the next put: %v", err)
	}
}
