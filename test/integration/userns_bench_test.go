package integration

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/runc"
	"github.com/cubby-dev/cubby/internal/runtime/runtimetest"
)

// BenchmarkCreateUserns measures what user namespaces cost a sandbox on runc:
// Backend.Create of a base sandbox (id range, user and network namespace,
// idmapped rootfs, runc start, agent up and initialised) and Kill, with user
// namespaces ("userns") and without ("plain", as --userns=false). Each
// iteration creates and kills one sandbox of each kind in turn, so both see
// the same load; it reports the medians in ms of each and of the per-iteration
// difference of the creates.
func BenchmarkCreateUserns(b *testing.B) {
	bin := repoBinary(b, "runc", "CUBBY_RUNC")
	newRT := func(root string, log *slog.Logger) runtime.Runtime { return runc.New(bin, root, log) }
	envs := []*backendEnv{newBackendEnv(b, "cbu", true, newRT), newBackendEnv(b, "cbp", false, newRT)}
	var create, kill [2][]time.Duration
	var extra []time.Duration
	for b.Loop() {
		for i, e := range envs {
			c, k := createKill(b, e)
			create[i], kill[i] = append(create[i], c), append(kill[i], k)
		}
		extra = append(extra, create[0][len(create[0])-1]-create[1][len(create[1])-1])
	}
	b.ReportMetric(runtimetest.MedianMs(create[0]), "userns-create-ms")
	b.ReportMetric(runtimetest.MedianMs(create[1]), "plain-create-ms")
	b.ReportMetric(runtimetest.MedianMs(extra), "extra-create-ms")
	b.ReportMetric(runtimetest.MedianMs(kill[0]), "userns-kill-ms")
	b.ReportMetric(runtimetest.MedianMs(kill[1]), "plain-kill-ms")
}

// createKill creates a base sandbox on e's backend and kills it, returning how
// long each took.
func createKill(b *testing.B, e *backendEnv) (create, kill time.Duration) {
	ctx := context.Background()
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
	return t1.Sub(t0), time.Since(t1)
}
