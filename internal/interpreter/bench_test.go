package interpreter

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/jupyter"
)

func p50ms(ds []time.Duration) float64 {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return float64(ds[len(ds)/2]) / float64(time.Millisecond)
}

// BenchmarkExecuteHTTPvsRaw alternates `x += 1; x` on a raw jupyter.Kernel and
// through POST /execute (httptest, NDJSON parsed like the SDKs) on the same
// host, reporting both medians and their ratio (http / raw).
func BenchmarkExecuteHTTPvsRaw(b *testing.B) {
	havePython(b)
	ks, err := jupyter.LookupKernelSpec(jupyter.KernelSpecDirs("", ""), "python3")
	if err != nil {
		b.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s0, _ := New(Config{})
	k, err := jupyter.Start(ctx, ks, jupyter.Options{ExtraArgs: s0.pythonArgs(), RuntimeDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer k.Close()
	_, base := newService(b, nil)
	k.Execute(ctx, jupyter.ExecuteRequest{Code: "x = 0"}, nil)
	runCode(b, base, code("x = 0"))
	raw := make([]time.Duration, 0, b.N)
	viaHTTP := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if r, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: "x += 1; x", StoreHistory: true}, func(*jupyter.Message) {}); err != nil || r.Status != "ok" {
			b.Fatalf("raw: %+v %v", r, err)
		}
		raw = append(raw, time.Since(t0))
		t0 = time.Now()
		if x := runCode(b, base, code("x += 1; x")); len(x.results) != 1 {
			b.Fatalf("http: %v", x.lines)
		}
		viaHTTP = append(viaHTTP, time.Since(t0))
	}
	r, h := p50ms(raw), p50ms(viaHTTP)
	b.ReportMetric(r, "raw-p50-ms")
	b.ReportMetric(h, "http-p50-ms")
	b.ReportMetric(h/r, "ratio")
}
