package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkKill measures recording a kill (MarkKilled: the scrubbed row) and
// then emptying the WAL (TruncateWAL), as the control plane does per kill, in
// a database holding 1000 killed records.
func BenchmarkKill(b *testing.B) {
	path := b.TempDir() + "/cubby.db"
	s, err := Open(context.Background(), path)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	for i := range 1000 {
		id := fmt.Sprintf("old%d", i)
		if err := s.InsertSandbox(ctx, secretRec(id, "x")); err != nil {
			b.Fatal(err)
		}
		if err := s.MarkKilled(ctx, id, time.Now(), "r"); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		i++
		id := fmt.Sprintf("b%d", i)
		b.StopTimer()
		if err := s.InsertSandbox(ctx, secretRec(id, "x")); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := s.MarkKilled(ctx, id, time.Now(), "r"); err != nil {
			b.Fatal(err)
		}
		if err := s.TruncateWAL(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
