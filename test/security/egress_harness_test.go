package security

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testinternet"
	"github.com/cubby-dev/cubby/sdk"
)

// The egress tests stand up their own "internet" (testinternet.Internet: a netns
// the host routes to, with HTTP/HTTPS echo servers, a raw TCP echo, DNS and a
// SOCKS5 proxy) and point the server's egress proxy at its DNS server and test
// CA through serve's environment (CUBBY_EGRESS_RESOLVER,
// CUBBY_EGRESS_UPSTREAM_CA), so nothing leaves the machine.

// sandboxCA is where the test internet's CA is written inside sandboxes, for
// curl --cacert on TLS that passes through the proxy untouched.
const sandboxCA = "/tmp/test-internet-ca.pem"

// egressEnv is a server with a test internet.
type egressEnv struct {
	*server
	inet *testinternet.Internet
}

// startEgress creates a test internet and a server using it.
func startEgress(t *testing.T, args ...string) *egressEnv {
	t.Helper()
	inet, err := testinternet.NewInternet(t.TempDir())
	if err != nil {
		t.Fatalf("test internet: %v", err)
	}
	t.Cleanup(inet.Close)
	t.Setenv("CUBBY_EGRESS_RESOLVER", inet.DNS.String())
	t.Setenv("CUBBY_EGRESS_UPSTREAM_CA", inet.CAFile)
	return &egressEnv{server: startServer(t, args...), inet: inet}
}

// sandbox creates a base sandbox with network and the test CA file inside.
func (e *egressEnv) sandbox(t *testing.T, network *sdk.NetworkOptions) *sdk.Sandbox {
	t.Helper()
	sbx := e.createWith(t, &sdk.CreateOptions{Network: network, Timeout: 10 * time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sbx.Files.Write(ctx, sandboxCA, e.inet.CA.PEM, &sdk.WriteOptions{User: "root"}); err != nil {
		t.Fatalf("write the test CA into the sandbox: %v", err)
	}
	return sbx
}

// curlResult is what curl did inside a sandbox.
type curlResult struct {
	Code    int    // curl's exit code (0 = a response, 6 = name not resolved, 7 = refused, 35/56 = reset ...)
	Status  string // HTTP status, "000" without a response
	Body    string
	Elapsed time.Duration
}

// curl runs curl as root in sbx with args (a 10 s cap) and returns its outcome.
func curl(t *testing.T, sbx *sdk.Sandbox, args string) curlResult {
	t.Helper()
	cmd := fmt.Sprintf(`s=$(date +%%s%%N); out=$(curl -sS -m 10 --cacert %s -w '\n%%{http_code}' %s 2>&1); rc=$?; e=$(( ($(date +%%s%%N) - s) / 1000000 )); printf '%%s\nRC=%%s MS=%%s\n' "$out" $rc $e`, sandboxCA, args)
	res := asRoot(t, sbx, cmd)
	m := regexp.MustCompile(`(?s)^(.*)\n(\d{3})\nRC=(\d+) MS=(\d+)\s*$`).FindStringSubmatch(res.Out)
	if m == nil {
		t.Fatalf("curl %s: unexpected output %q", args, res.Out)
	}
	var r curlResult
	fmt.Sscan(m[3], &r.Code)
	var ms int
	fmt.Sscan(m[4], &ms)
	r.Body, r.Status, r.Elapsed = m[1], m[2], time.Duration(ms)*time.Millisecond
	return r
}

// server returns the "server" field of an echo answer ("" when it is not one).
func echoServer(body string) string {
	var v struct{ Server string }
	if json.Unmarshal([]byte(body), &v) != nil {
		return ""
	}
	return v.Server
}

// refusedFast fails unless r is a refusal (no answer from a test server) that
// took under 3 s (no hang).
func refusedFast(t *testing.T, what string, r curlResult) {
	t.Helper()
	if echoServer(r.Body) != "" || (r.Code == 0 && r.Status == "200") {
		t.Errorf("%s: got through (exit %d, status %s): %s", what, r.Code, r.Status, r.Body)
	}
	if r.Elapsed > 3*time.Second {
		t.Errorf("%s: took %v to be refused (it must not hang)", what, r.Elapsed)
	}
}

// logHas reports whether the sandbox's logs hold a line with every needle.
func (e *egressEnv) logHas(t *testing.T, id string, needles ...string) bool {
	t.Helper()
	req, _ := http.NewRequest("GET", e.URL("/sandboxes/"+id+"/logs"), nil)
	req.Header.Set("X-API-Key", e.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "},{") {
		ok := true
		for _, n := range needles {
			ok = ok && strings.Contains(line, n)
		}
		if ok {
			return true
		}
	}
	return false
}

// api sends a control-plane request with the server's key and returns the
// status and body.
func (e *egressEnv) api(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.URL(path), strings.NewReader(body))
	req.Header.Set("X-API-Key", e.Key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of the Prometheus sample named name (with labels).
func (e *egressEnv) metric(t *testing.T, sample string) float64 {
	t.Helper()
	resp, err := http.Get(e.URL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, sample+" ") {
			var v float64
			fmt.Sscan(strings.TrimPrefix(line, sample+" "), &v)
			return v
		}
	}
	return 0
}

// domainPolicy allows names (and nothing else).
func domainPolicy(names ...string) *sdk.NetworkOptions {
	return &sdk.NetworkOptions{NetworkUpdate: sdk.NetworkUpdate{AllowOut: names, DenyOut: []string{sdk.AllTraffic}}}
}
