package network

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkAttach measures Attach (and, separately, Detach) of one sandbox
// network and reports the medians in ms as custom metrics.
func BenchmarkAttach(b *testing.B) {
	m := newTestManager(b)
	ctx := context.Background()
	var attach, detach []time.Duration
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("b%d", i)
		i++
		t0 := time.Now()
		if _, err := m.Attach(ctx, id); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := m.Detach(ctx, id); err != nil {
			b.Fatal(err)
		}
		attach = append(attach, t1.Sub(t0))
		detach = append(detach, time.Since(t1))
	}
	b.ReportMetric(medianMS(attach), "attach-median-ms")
	b.ReportMetric(medianMS(detach), "detach-median-ms")
}

func medianMS(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}
