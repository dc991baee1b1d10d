package integration

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/ocicli/ocitest"
	"github.com/cubby-dev/cubby/internal/runtime/runc"
)

// BenchmarkCreateUserns measures what user namespaces cost a sandbox on runc:
// Backend.Create of a base sandbox (id range, user and network namespace,
// idmapped rootfs, runc start, agent up and initialised) and Kill, with user
// namespaces ("userns") and without ("plain", --userns=false), reporting the
// medians in ms.
func BenchmarkCreateUserns(b *testing.B) {
	for _, mode := range []struct {
		name   string
		userns bool
	}{{"userns", true}, {"plain", false}} {
		b.Run(mode.name, func(b *testing.B) {
			bin := repoBinary(b, "runc", "CUBBY_RUNC")
			e := newBackendEnv(b, "cbb", mode.userns, func(root string, log *slog.Logger) runtime.Runtime {
				return runc.New(bin, root, log)
			})
			ctx := context.Background()
			var create, kill []time.Duration
			for b.Loop() {
				id := "b" + randHex(8)
				t0 := time.Now()
				_, err := e.b.Create(ctx, backend.CreateRequest{
					SandboxID: id, RootfsDir: e.lower, CPUCount: 1, MemoryMB: 512, DiskSizeMB: 512,
					Init: agentapi.InitRequest{AccessToken: randHex(16), DefaultUser: "user", DefaultWorkdir: "/home/user"},
				})
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := e.b.Kill(ctx, id); err != nil {
					b.Fatal(err)
				}
				create, kill = append(create, t1.Sub(t0)), append(kill, time.Since(t1))
			}
			b.ReportMetric(ocitest.MedianMs(create), "create-ms")
			b.ReportMetric(ocitest.MedianMs(kill), "kill-ms")
		})
	}
}
