package interpreter

import (
	"context"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/interpreter/zygote"
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

// memoryMiB returns the PSS and USS (private clean + dirty) of pid in MiB from
// /proc/<pid>/smaps_rollup.
func memoryMiB(tb testing.TB, pid int) (pss, uss float64) {
	tb.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		tb.Fatalf("smaps_rollup of %d: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "Pss:":
			pss += kb / 1024
		case "Private_Clean:", "Private_Dirty:":
			uss += kb / 1024
		}
	}
	return pss, uss
}

// BenchmarkContextStartColdVsZygote measures POST /contexts (python) → first
// result of `x = 1; x` through the HTTP API, interleaving three services in the
// same run: cold kernels (NoZygote), kernels forked from a fork server with the
// default preload (data stack + extension) and from a bare one. It reports the
// medians and the median PSS/USS of the new kernel right after its first result
// (MiB), plus the fork servers' own PSS. Run with -benchtime=Nx.
func BenchmarkContextStartColdVsZygote(b *testing.B) {
	havePython(b)
	type variant struct {
		name     string
		mod      func(*Config)
		s        *Service
		base     string
		ms       []time.Duration
		pss, uss []float64
	}
	vs := []*variant{
		{name: "cold", mod: func(c *Config) { c.NoZygote = true }},
		{name: "zygote", mod: func(c *Config) { c.ZygotePreload = nil }},
		{name: "zygote-bare", mod: func(c *Config) { c.ZygotePreload = []string{} }},
	}
	for _, v := range vs {
		v.s, v.base = newService(b, v.mod)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, v := range vs {
			t0 := time.Now()
			c := createContext(b, v.base, map[string]any{"language": "python"})
			x := runCode(b, v.base, map[string]any{"context_id": c.ID, "code": "x = 1; x"})
			v.ms = append(v.ms, time.Since(t0))
			if len(x.results) != 1 || x.results[0]["text"] != "1" {
				b.Fatalf("%s: %v", v.name, x.lines)
			}
			b.StopTimer()
			pss, uss := memoryMiB(b, v.s.lookup(c.ID).eng.(*kernelEngine).k.Pid())
			v.pss, v.uss = append(v.pss, pss), append(v.uss, uss)
			req, _ := http.NewRequest(http.MethodDelete, v.base+"/contexts/"+c.ID, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			b.StartTimer()
		}
	}
	b.StopTimer()
	for _, v := range vs {
		b.ReportMetric(p50ms(v.ms), v.name+"-p50-ms")
		b.ReportMetric(median(v.pss), v.name+"-pss-MiB")
		b.ReportMetric(median(v.uss), v.name+"-uss-MiB")
		if srv := forkServerOf(v.s); srv != nil {
			pss, _ := memoryMiB(b, srv.Pid())
			b.ReportMetric(pss, v.name+"-server-pss-MiB")
		}
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func forkServerOf(s *Service) *zygote.Server {
	if s.fork == nil {
		return nil
	}
	return s.fork.current()
}
