package zygote

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/jupyter"
	"github.com/cubby-dev/cubby/internal/meminfo"
)

// rollup returns the process's smaps_rollup in MiB: Pss and Anonymous.
func rollup(tb testing.TB, pid int) map[string]float64 {
	tb.Helper()
	r, err := meminfo.ReadRollup(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return map[string]float64{"Pss": float64(r.PSS) / (1 << 20), "Anonymous": float64(r.Anon) / (1 << 20)}
}

// BenchmarkIdleMemory reports the memory of a fork server and one idle
// kernel forked from it (zygote-pss-MiB, kernel-pss-MiB, kernel-anon-MiB,
// total-pss-MiB) and the server's start → ready time (ready-ms) for the
// interpreter service's configurations: the data stack imported before the
// first fork (eager) or not at all before it (late, the default), with the
// default exclusions or none, with and without MALLOC_ARENA_MAX=2. Run with
// -benchtime=1x.
func BenchmarkIdleMemory(b *testing.B) {
	py := pythonSpec(b).Argv[0]
	cases := []struct {
		name    string
		preload []string
		exclude []string
		env     []string
	}{
		{"eager", DefaultPreload(), []string{}, nil},
		{"eager-exclude", DefaultPreload(), DefaultExclude(), nil},
		{"late-exclude", []string{}, DefaultExclude(), nil},
		{"late-exclude-arenas2", []string{}, DefaultExclude(), []string{"MALLOC_ARENA_MAX=2"}},
		{"eager-exclude-arenas2", DefaultPreload(), DefaultExclude(), []string{"MALLOC_ARENA_MAX=2"}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				env := append([]string{"PATH=/usr/bin:/bin", "HOME=" + os.TempDir()}, c.env...)
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				t0 := time.Now()
				s, err := Start(ctx, Config{Python: py, Preload: c.preload, Exclude: c.exclude, Env: env, RuntimeDir: b.TempDir()})
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				ready := time.Since(t0)
				o := jupyter.Options{ExtraArgs: pythonArgs, RuntimeDir: b.TempDir(), Launcher: s, Env: env}
				ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
				k, err := jupyter.Start(ctx, pythonSpec(b), o)
				cancel()
				if err != nil {
					s.Close()
					b.Fatal(err)
				}
				if r, err := k.Execute(context.Background(), jupyter.ExecuteRequest{Code: "x = 1"}, nil); err != nil || r.Status != "ok" {
					b.Fatalf("execute: %+v %v", r, err)
				}
				time.Sleep(time.Second) // idle
				z, kk := rollup(b, s.Pid()), rollup(b, k.Pid())
				k.Close()
				s.Close()
				b.ReportMetric(z["Pss"], "zygote-pss-MiB")
				b.ReportMetric(kk["Pss"], "kernel-pss-MiB")
				b.ReportMetric(kk["Anonymous"], "kernel-anon-MiB")
				b.ReportMetric(z["Pss"]+kk["Pss"], "total-pss-MiB")
				b.ReportMetric(float64(ready.Milliseconds()), "ready-ms")
			}
		})
	}
}
