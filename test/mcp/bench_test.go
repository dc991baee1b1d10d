package mcptest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkRunCode measures a run_code call of `x + 1` in the session's warm
// sandbox over each transport and reports the median round trip in ms.
//
//	CUBBY_BIN=$PWD/bin/cubby go test -run XXX -bench RunCode -benchtime 50x ./test/mcp/
func BenchmarkRunCode(b *testing.B) {
	for _, kind := range transports {
		b.Run(kind, func(b *testing.B) {
			cs, _ := connect(b, kind, srv.Key)
			call := func() {
				res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "x = 1\nx + 1"}})
				if err != nil || res.IsError {
					b.Fatalf("run_code: %v %s", err, text(res))
				}
			}
			call() // creates the session's sandbox
			var ms []float64
			for b.Loop() {
				start := time.Now()
				call()
				ms = append(ms, float64(time.Since(start).Microseconds())/1000)
			}
			slices.Sort(ms)
			b.ReportMetric(ms[len(ms)/2], "ms-median")
		})
	}
}
