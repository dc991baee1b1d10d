package jupyter

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/meminfo"
)

// smapsRollup returns the process's smaps_rollup in bytes: Pss and Anonymous.
func smapsRollup(tb testing.TB, pid int) map[string]float64 {
	tb.Helper()
	r, err := meminfo.ReadRollup(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return map[string]float64{"Pss": float64(r.PSS), "Anonymous": float64(r.Anon)}
}

// BenchmarkDenoIdleMemory starts Deno's kernel with each DENO_V8_FLAGS value,
// runs one small cell and reports the idle kernel's memory (pss-MiB,
// anon-MiB from /proc/<pid>/smaps_rollup) and start → kernel_info time
// (start-ms). Host: `npm i -g deno`. Run with -benchtime=1x.
func BenchmarkDenoIdleMemory(b *testing.B) {
	bin, err := exec.LookPath("deno")
	if err != nil {
		b.Skip("deno not installed (npm i -g deno)")
	}
	// An empty DENO_V8_FLAGS makes deno exit 1, so "" means the variable unset.
	for _, flags := range []string{"", "--single-threaded", "--lite-mode", "--max-semi-space-size=1"} {
		b.Run("flags="+flags, func(b *testing.B) {
			for range b.N {
				spec := &KernelSpec{Name: "deno", Argv: []string{bin, "jupyter", "--kernel", "--conn", "{connection_file}"},
					Language: "typescript", InterruptMode: "message"}
				env := []string{"NO_COLOR=1", "PATH=/usr/bin:/bin", "HOME=" + b.TempDir()}
				if flags != "" {
					env = append(env, "DENO_V8_FLAGS="+flags)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				t0 := time.Now()
				k, err := Start(ctx, spec, Options{Transport: TCP, SettleDelay: 25 * time.Millisecond, RuntimeDir: b.TempDir(),
					Env: env})
				cancel()
				if err != nil {
					b.Fatal(err)
				}
				start := time.Since(t0)
				r, err := k.Execute(context.Background(), ExecuteRequest{Code: "let x = [1, 2, 3].map((v) => v * 2); x.length"}, nil)
				if err != nil || r.Status != "ok" {
					b.Fatalf("execute: %+v %v", r, err)
				}
				time.Sleep(2 * time.Second) // idle: let V8 finish background compilation and GC
				m := smapsRollup(b, k.Pid())
				k.Close()
				b.ReportMetric(m["Pss"]/(1<<20), "pss-MiB")
				b.ReportMetric(m["Anonymous"]/(1<<20), "anon-MiB")
				b.ReportMetric(float64(start.Milliseconds()), "start-ms")
			}
		})
	}
}
