package interpreter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/interpreter/zygote"
	"github.com/cubby-dev/cubby/internal/agent/jupyter"
	"github.com/cubby-dev/cubby/internal/gateway"
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

// staticRoutes is a one-sandbox stand-in for the control plane's in-memory route
// table (gateway.Resolver), pointing at the interpreter's loopback listener.
type staticRoutes struct{ t gateway.Target }

func (s staticRoutes) Resolve(id string) (gateway.Target, bool) { return s.t, id == s.t.ID }
func (s staticRoutes) Targets() []gateway.Target                { return []gateway.Target{s.t} }

// BenchmarkExecuteFullStackVsRaw runs `x += 1; x` on ONE kernel (the service's
// default Python context) three ways per iteration, rotating their order: raw
// jupyter.Kernel.Execute (reply + idle, as bench/sdk/rawkernel.py times it),
// POST /execute straight to the interpreter handler, and POST /execute through
// a real gateway.Gateway in front of it (header-routed like the SDKs, HTTP/1.1
// keep-alive on both hops, all on loopback). It reports the three medians and
// the ratios http/raw and gateway/raw, and checks x rises by one every time.
func BenchmarkExecuteFullStackVsRaw(b *testing.B) {
	havePython(b)
	s, base := newService(b, nil)
	c := s.defaults[LangPython]
	if c == nil {
		b.Fatal("no default python context")
	}
	k := c.eng.(*kernelEngine).k
	u, err := url.Parse(base)
	if err != nil {
		b.Fatal(err)
	}
	ap := netip.MustParseAddrPort(u.Host)
	const id = "benchsbx"
	gw := gateway.New(staticRoutes{gateway.Target{ID: id, Addr: ap.Addr(), Running: true}}, gateway.Config{}, nil)
	gsrv := httptest.NewUnstartedServer(gw)
	gsrv.Config.ConnContext = gw.ConnContext
	gsrv.Start()
	b.Cleanup(func() { gsrv.Close(); gw.CloseIdleConnections() })
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)
	ctx := context.Background()
	want := 0
	check := func(path string, got string) {
		want++
		if got != strconv.Itoa(want) {
			b.Fatalf("%s: x = %q, want %d", path, got, want)
		}
	}
	viaHTTP := func(target string, hdr map[string]string) string {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target+"/execute",
			strings.NewReader(`{"code":"x += 1; x","context_id":null,"language":null,"env_vars":null}`))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		text, err := mainResult(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %d %v", target, resp.StatusCode, err)
		}
		return text
	}
	paths := []struct {
		name string
		run  func() string
		ms   []time.Duration
	}{
		{name: "raw", run: func() string {
			var text string
			r, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: "x += 1; x", StoreHistory: true}, func(m *jupyter.Message) {
				if m.Type() == "execute_result" {
					var c struct {
						Data map[string]string `json:"data"`
					}
					m.Decode(&c)
					text = c.Data["text/plain"]
				}
			})
			if err != nil || r.Status != "ok" {
				b.Fatalf("raw: %+v %v", r, err)
			}
			return text
		}},
		{name: "http", run: func() string { return viaHTTP(base, nil) }},
		{name: "gateway", run: func() string {
			return viaHTTP(gsrv.URL, map[string]string{gateway.HeaderSandboxID: id,
				gateway.HeaderSandboxPort: strconv.Itoa(int(ap.Port()))})
		}},
	}
	if _, err := k.Execute(ctx, jupyter.ExecuteRequest{Code: "x = 0", Silent: true}, nil); err != nil {
		b.Fatal(err)
	}
	for i := range paths { // warm connections and code paths
		check(paths[i].name, paths[i].run())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range paths {
			p := &paths[(i+j)%len(paths)]
			t0 := time.Now()
			got := p.run()
			p.ms = append(p.ms, time.Since(t0))
			check(p.name, got)
		}
	}
	b.StopTimer()
	raw := p50ms(paths[0].ms)
	for _, p := range paths {
		b.ReportMetric(p50ms(p.ms), p.name+"-p50-ms")
	}
	b.ReportMetric(p50ms(paths[1].ms)/raw, "http/raw")
	b.ReportMetric(p50ms(paths[2].ms)/raw, "gateway/raw")
}

// mainResult reads an /execute NDJSON stream the way the SDKs do (split on
// "\n", JSON-parse each line) and returns the main result's text; it fails on
// an error line or a stream that does not end with end_of_execution.
func mainResult(r io.Reader) (string, error) {
	br := bufio.NewReader(r)
	var text, last string
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var l struct {
				Type   string `json:"type"`
				Text   string `json:"text"`
				IsMain bool   `json:"is_main_result"`
				Value  string `json:"value"`
			}
			if jerr := json.Unmarshal(line, &l); jerr != nil {
				return "", fmt.Errorf("line %q: %w", line, jerr)
			}
			switch {
			case l.Type == "error":
				return "", fmt.Errorf("error line: %s", l.Value)
			case l.Type == "result" && l.IsMain:
				text = l.Text
			}
			last = l.Type
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", err
		}
	}
	if last != "end_of_execution" {
		return "", fmt.Errorf("stream ended with %q, want end_of_execution", last)
	}
	return text, nil
}
