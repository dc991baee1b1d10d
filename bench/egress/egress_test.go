// Package egress benchmarks requests from inside a real sandbox to a test
// internet (testinternet.Internet) straight through the host (no policy) and
// through the egress proxy (a domain allowlist), in the same run against the
// same server:
//
//	CUBBY_BIN=$PWD/bin/cubby go test -run '^$' -bench Latency -benchtime 300x ./bench/egress/
//	CUBBY_BIN=$PWD/bin/cubby go test -run '^$' -bench Download -benchtime 15x ./bench/egress/
//
// Each sub-benchmark runs b.N requests in one batch inside the sandbox
// (python3, http.client) and reports the median and 99th percentile of the
// per-request latency measured there ("p50-ms", "p99-ms"); the download
// rows report the median throughput of 32 MiB bodies ("MiB/s-p50").
// BENCHMARKS.md has the figures.
package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testinternet"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

// client is the in-sandbox request loop: args mode (new: a connection per
// request; keep: one kept-alive connection; get: download), scheme, host
// name, address, count, path. It prints the latencies in ms as a JSON list.
const client = `
import http.client, json, socket, ssl, sys, time
mode, scheme, host, ip, n, path = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
ctx = ssl.create_default_context(cafile="/tmp/test-internet-ca.pem")
ctx.load_verify_locations("/etc/ssl/certs/ca-certificates.crt")
def connect():
    if scheme == "http":
        c = http.client.HTTPConnection(ip, 80)
    else:
        c = http.client.HTTPSConnection(host, 443, context=ctx)
        c.sock = ctx.wrap_socket(socket.create_connection((ip, 443)), server_hostname=host)
    return c
def get(c):
    c.request("GET", path, headers={"Host": host})
    r = c.getresponse(); body = r.read()
    assert r.status == 200, (r.status, body[:200])
    return len(body)
out, keep = [], None
for i in range(n):
    t = time.perf_counter()
    if mode == "keep":
        keep = keep or connect(); get(keep)
    else:
        c = connect(); get(c); c.close()
    out.append((time.perf_counter() - t) * 1000)
print(json.dumps(out))
`

// downloadBytes is the size of one download.
const downloadBytes = 32 << 20

// bench is a server with a test internet and two sandboxes: one without
// policy, one allowed allowed.test and echo.test only (echo.test with a
// header rule, so its HTTPS is terminated).
type bench struct {
	inet            *testinternet.Internet
	direct, proxied *sdk.Sandbox
}

func setup(b *testing.B) *bench {
	if reason := testserver.SkipReason(); reason != "" {
		b.Skip(reason)
	}
	inet, err := testinternet.NewInternet(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(inet.Close)
	b.Setenv("CUBBY_EGRESS_RESOLVER", inet.DNS.String())
	b.Setenv("CUBBY_EGRESS_UPSTREAM_CA", inet.CAFile)
	s := testserver.Start(b, testserver.Options{BridgePrefix: "cbbeg"})
	conn := sdk.ConnectionOptions{APIKey: s.Key, APIURL: "http://" + s.Addr, SandboxURL: "http://" + s.Addr}
	ctx := context.Background()
	if _, err := sdk.CreateSecret(ctx, conn, "bench", "bench-secret-value", nil); err != nil {
		b.Fatal(err)
	}
	mk := func(n *sdk.NetworkOptions) *sdk.Sandbox {
		sbx := s.Create(b, &sdk.CreateOptions{ConnectionOptions: conn, Template: "base", Network: n, Timeout: time.Hour})
		for path, data := range map[string][]byte{"/tmp/test-internet-ca.pem": inet.CA.PEM, "/tmp/client.py": []byte(client)} {
			if _, err := sbx.Files.Write(ctx, path, data, nil); err != nil {
				b.Fatal(err)
			}
		}
		return sbx
	}
	return &bench{inet: inet, direct: mk(nil), proxied: mk(&sdk.NetworkOptions{NetworkUpdate: sdk.NetworkUpdate{
		AllowOut: []string{"allowed.test", "echo.test"}, DenyOut: []string{sdk.AllTraffic},
		Rules: map[string][]sdk.NetworkRule{"echo.test": {{Headers: map[string]string{"Authorization": sdk.SecretPlaceholder("bench")}}}}}})}
}

// run runs the client in sbx with n requests and returns its latencies (ms).
func run(b *testing.B, sbx *sdk.Sandbox, mode, scheme, host, path string, n int) []float64 {
	ip := ""
	if a := benchInet.Addr(host); a.IsValid() {
		ip = a.String()
	}
	cmd := fmt.Sprintf("python3 /tmp/client.py %s %s %s %s %d '%s'", mode, scheme, host, ip, n, path)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := sbx.Commands.Run(ctx, cmd, &sdk.CommandOptions{Timeout: 9 * time.Minute})
	if err != nil {
		b.Fatalf("%s: %v", cmd, err)
	}
	var ms []float64
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &ms); err != nil {
		b.Fatalf("%s: %q", cmd, res.Stdout)
	}
	return ms
}

// benchInet is the internet of the running benchmark (run needs its names).
var benchInet *testinternet.Internet

// path is one way of making a request: a sandbox and the host it asks for.
type path struct {
	label string
	sbx   *sdk.Sandbox
	host  string
}

// rounds is how many alternating batches each path of a comparison gets, so
// all paths see the same load of this shared machine.
const rounds = 5

// compare runs b.N requests (mode, scheme, url path) on each path, in rounds
// alternating between the paths, and returns the latencies per path (ms).
func compare(b *testing.B, mode, scheme, urlPath string, paths []path) map[string][]float64 {
	out := map[string][]float64{}
	per := max(1, b.N/rounds)
	for r := 0; r < rounds; r++ {
		for _, p := range paths {
			out[p.label] = append(out[p.label], run(b, p.sbx, mode, scheme, p.host, urlPath, per)...)
		}
	}
	return out
}

func median(ms []float64) float64 {
	slices.Sort(ms)
	return ms[len(ms)/2]
}

func p99(ms []float64) float64 {
	slices.Sort(ms)
	return ms[min(len(ms)-1, len(ms)*99/100)]
}

// BenchmarkEgressLatency compares request latency straight out and through
// the egress proxy ("direct", "proxy"; over HTTPS the proxy passes TLS
// through, or terminates it for a host with a header rule: "terminated").
func BenchmarkEgressLatency(b *testing.B) {
	e := setup(b)
	benchInet = e.inet
	for _, c := range []struct{ name, mode, scheme string }{
		{"http-new-conn", "new", "http"}, {"http-keepalive", "keep", "http"}, {"https-new-conn", "new", "https"},
		{"https-keepalive", "keep", "https"},
	} {
		b.Run(c.name, func(b *testing.B) {
			paths := []path{{"direct", e.direct, "allowed.test"}, {"proxy", e.proxied, "allowed.test"}}
			if c.scheme == "https" {
				paths = append(paths, path{"terminated", e.proxied, "echo.test"})
			}
			got := compare(b, c.mode, c.scheme, "/", paths)
			for _, p := range paths {
				b.ReportMetric(median(got[p.label]), p.label+"-p50-ms")
				b.ReportMetric(p99(got[p.label]), p.label+"-p99-ms")
			}
		})
	}
}

// BenchmarkEgressDownload compares download throughput (32 MiB bodies over
// a kept-alive connection) straight out and through the egress proxy.
func BenchmarkEgressDownload(b *testing.B) {
	e := setup(b)
	benchInet = e.inet
	for _, scheme := range []string{"http", "https"} {
		b.Run(scheme, func(b *testing.B) {
			paths := []path{{"direct", e.direct, "allowed.test"}, {"proxy", e.proxied, "allowed.test"}}
			if scheme == "https" {
				paths = append(paths, path{"terminated", e.proxied, "echo.test"})
			}
			got := compare(b, "keep", scheme, fmt.Sprintf("/bytes?n=%d", downloadBytes), paths)
			for _, p := range paths {
				b.ReportMetric(float64(downloadBytes)/(1<<20)/(median(got[p.label])/1000), p.label+"-MiB/s")
			}
		})
	}
}
