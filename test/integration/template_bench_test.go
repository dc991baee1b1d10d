package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// BenchmarkTemplate measures, through the template build API of a real
// server, with a small template from a minimal Debian image in a local
// registry (provisioning installs sudo with apt from the real Debian
// mirror, then COPY, ENV, WORKDIR and two RUN steps):
//
//   - full: a build with every step forced (E2B's skipCache), the image's
//     layers being cached by digest after the first pull;
//   - rebuild-last-step: a build whose last step changed, every earlier
//     step a cache hit;
//   - create: Sandbox create (POST /v2/sandboxes) from the built template.
//
// Each reports the median in seconds ("s/median") besides Go's mean:
//
//	CUBBY_BIN=$PWD/bin/cubby go test -run XXX -bench BenchmarkTemplate -benchtime 5x ./test/integration/
func BenchmarkTemplate(b *testing.B) {
	ref, _ := debianImage(b, "", "")
	ts := testserver.Start(b, testserver.Options{BridgePrefix: "cbbn"})
	ctx := context.Background()
	b0, err := ts.RequestBuild(ctx, "bench-small")
	if err != nil {
		b.Fatal(err)
	}
	hash, err := ts.Upload(ctx, b0.TemplateID, tarOf(b, map[string]string{"app/main.py": "print('hi')\n", "app/data.txt": "data\n"}))
	if err != nil {
		b.Fatal(err)
	}
	body := func(last string, force bool) map[string]any {
		return map[string]any{"fromImage": ref, "force": force, "steps": []map[string]any{
			{"type": "COPY", "args": []string{"app", "/srv/app"}, "filesHash": hash},
			{"type": "ENV", "args": []string{"MODE", "bench"}},
			{"type": "WORKDIR", "args": []string{"/srv/app"}},
			{"type": "RUN", "args": []string{"ls /usr/bin | wc -l > /srv/count", "root"}},
			{"type": "RUN", "args": []string{"echo " + last + " > /srv/last", "root"}},
		}}
	}
	build := func(b *testing.B, last string, force bool) {
		_, res, err := ts.Build(ctx, "bench-small", body(last, force))
		if err != nil || res.Status != "ready" {
			b.Fatalf("build: %v %+v\n%s", err, res, res.LogText())
		}
	}
	build(b, "warm", false) // pulls the image once; later builds find its layers cached
	b.Run("full", func(b *testing.B) {
		medianOf(b, func(i int) func() { build(b, "full", true); return nil })
	})
	b.Run("rebuild-last-step", func(b *testing.B) {
		medianOf(b, func(i int) func() { build(b, fmt.Sprintf("v%d-%d", i, time.Now().UnixNano()), false); return nil })
	})
	b.Run("create", func(b *testing.B) {
		medianOf(b, func(int) func() {
			var out struct {
				SandboxID string `json:"sandboxID"`
			}
			if code, err := ts.API(ctx, http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "bench-small"}, &out); err != nil || code != 201 {
				b.Fatalf("create: %d %v", code, err)
			}
			return func() { ts.API(ctx, http.MethodDelete, "/sandboxes/"+out.SandboxID, nil, nil) }
		})
	})
}

// medianOf runs op b.N times, timing each run (not the clean-up it
// returns, run untimed), and reports their median.
func medianOf(b *testing.B, op func(i int) (cleanup func())) {
	b.Helper()
	samples := make([]float64, 0, b.N)
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cleanup := op(i)
		samples = append(samples, time.Since(start).Seconds())
		if cleanup != nil {
			b.StopTimer()
			cleanup()
			b.StartTimer()
		}
	}
	slices.Sort(samples)
	b.ReportMetric(samples[len(samples)/2], "s/median")
}
