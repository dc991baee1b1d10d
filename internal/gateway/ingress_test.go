package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
)

// TestMaskRequestHostAndHTTPSPorts: network.maskRequestHost replaces the Host
// sent to the sandbox (${PORT} filled in); a port in network.httpsPorts is
// reached over TLS with its self-signed certificate.
func TestMaskRequestHostAndHTTPSPorts(t *testing.T) {
	e := newEnv(t)
	hostSeen := func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Host+" tls="+strconv.FormatBool(r.TLS != nil))
	}
	plain := startSandbox(t, 0, http.HandlerFunc(hostSeen))
	ln := listenLoopback(t, 0)
	secure := httptest.NewUnstartedServer(http.HandlerFunc(hostSeen))
	_ = secure.Listener.Close()
	secure.Listener = ln
	secure.StartTLS()
	t.Cleanup(secure.Close)
	securePort := int(netip.MustParseAddrPort(ln.Addr().String()).Port())

	id := randomID()
	e.cp.set(Target{ID: id, Addr: plain.addr, Running: true, MaskRequestHost: "${PORT}-masked.example"})
	if got := e.get(t, id, plain.port); got != strconv.Itoa(plain.port)+"-masked.example tls=false" {
		t.Fatalf("masked host: %q", got)
	}
	id2 := randomID()
	e.cp.set(Target{ID: id2, Addr: netip.MustParseAddrPort(ln.Addr().String()).Addr(), Running: true, HTTPSPorts: []int{securePort}})
	if got := e.get(t, id2, securePort); got != e.srv.Listener.Addr().String()+" tls=true" {
		t.Fatalf("https port: %q", got)
	}
}

func (e *testEnv) get(t *testing.T, id string, port int) string {
	t.Helper()
	resp, err := e.client.Do(e.request(t, "GET", "/", id, port, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	return string(b)
}
