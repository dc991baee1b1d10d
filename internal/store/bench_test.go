package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkKill measures recording a kill in a database holding 1000 killed
// records: MarkKilled alone (the scrubbed row), and followed by TruncateWAL,
// as the control plane does after each kill.
func BenchmarkKill(b *testing.B) {
	for _, truncate := range []bool{false, true} {
		name := "MarkKilled"
		if truncate {
			name += "+TruncateWAL"
		}
		b.Run(name, func(b *testing.B) { benchKill(b, truncate) })
	}
}

func benchKill(b *testing.B, truncate bool) {
	s, err := Open(context.Background(), b.TempDir()+"/cubby.db")
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
		if truncate {
			if err := s.TruncateWAL(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}
