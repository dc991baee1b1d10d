package jupyter

import (
	"context"
	"sort"
	"testing"
	"time"
)

// p50ms returns the median of ds in milliseconds.
func p50ms(ds []time.Duration) float64 {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return float64(ds[len(ds)/2]) / float64(time.Millisecond)
}

// BenchmarkExecuteRoundTrip measures execute_request → reply+idle for
// `x += 1; x` on a warm ipykernel (reported as p50-ms).
func BenchmarkExecuteRoundTrip(b *testing.B) {
	k := startPython(b, nil)
	ctx := context.Background()
	if _, err := k.Execute(ctx, ExecuteRequest{Code: "x = 0"}, nil); err != nil {
		b.Fatal(err)
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r, err := k.Execute(ctx, ExecuteRequest{Code: "x += 1; x", StoreHistory: true}, func(*Message) {})
		if err != nil || r.Status != "ok" {
			b.Fatalf("%+v %v", r, err)
		}
		ds = append(ds, time.Since(t0))
	}
	b.ReportMetric(p50ms(ds), "p50-ms")
}
