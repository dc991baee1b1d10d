package cluster

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// The benchmarks of the node tier (a real kubelet, containerd and runc), each
// reporting medians in ms:
//
//	CUBBY_BIN=$PWD/bin/cubby CUBBY_TEMPLATES_DIR=… go test -run XXX -bench Node -benchtime 10x ./test/cluster/
//
// BenchmarkNodeCreateFirstResult: create a code-interpreter sandbox through a
// replica and get the first runCode result, from a warm Pod pool and cold.
// BenchmarkNodeRunCode: a runCode round trip in a running sandbox through a
// replica and through a single-host server (same run, same machine).

const benchCode = "x = 1\nx + 1"

// firstResult creates a code-interpreter sandbox through conn, runs
// benchCode and returns the sandbox.
func firstResult(ctx context.Context, b *testing.B, conn sdk.ConnectionOptions) *sdk.Sandbox {
	b.Helper()
	sbx, err := sdk.Create(ctx, &sdk.CreateOptions{ConnectionOptions: conn, Template: "code-interpreter"})
	if err != nil {
		b.Fatal(err)
	}
	runCode(ctx, b, sbx)
	return sbx
}

func runCode(ctx context.Context, b *testing.B, sbx *sdk.Sandbox) {
	b.Helper()
	exec, err := sbx.RunCode(ctx, benchCode, nil)
	if err != nil || exec.Error != nil || strings.TrimSpace(exec.Text()) != "2" {
		b.Fatalf("runCode: %+v, %v", exec, err)
	}
}

// reportMedian reports the median of ms as ms-median.
func reportMedian(b *testing.B, ms []float64) {
	slices.Sort(ms)
	if len(ms) > 0 {
		b.ReportMetric(ms[len(ms)/2], "ms-median")
	}
}

func since(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }

func BenchmarkNodeCreateFirstResult(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	for _, mode := range []string{"warm", "cold"} {
		b.Run(mode, func(b *testing.B) {
			var args []string
			if mode == "warm" {
				args = []string{"--pool", "code-interpreter=1"}
			}
			f := nodeFleet(b, 1, args...)
			var ms []float64
			for b.Loop() {
				b.StopTimer()
				if mode == "warm" {
					eventually(b, 5*time.Minute, "a warm pod", func() bool { return f.warm() >= 1 })
					time.Sleep(300 * time.Millisecond) // the replica's informer sees it
				}
				b.StartTimer()
				began := time.Now()
				sbx := firstResult(ctx, b, f.conn(0))
				ms = append(ms, since(began))
				b.StopTimer()
				if err := sbx.Kill(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			reportMedian(b, ms)
		})
	}
}

func BenchmarkNodeRunCode(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	conns := map[string]func(b *testing.B) sdk.ConnectionOptions{
		"replica": func(b *testing.B) sdk.ConnectionOptions { return nodeFleet(b, 1).conn(0) },
		"single-host": func(b *testing.B) sdk.ConnectionOptions {
			s := testserver.Start(b, testserver.Options{})
			return sdk.ConnectionOptions{APIKey: s.Key, APIURL: s.URL(""), SandboxURL: s.URL(""), RequestTimeout: 3 * time.Minute}
		},
	}
	for _, mode := range []string{"replica", "single-host"} {
		b.Run(mode, func(b *testing.B) {
			sbx := firstResult(ctx, b, conns[mode](b))
			defer func() { _ = sbx.Kill(context.Background()) }()
			var ms []float64
			for b.Loop() {
				began := time.Now()
				runCode(ctx, b, sbx)
				ms = append(ms, since(began))
			}
			reportMedian(b, ms)
		})
	}
}
