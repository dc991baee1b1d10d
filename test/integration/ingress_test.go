package integration

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hostEcho is a Python server answering every GET with the Host header it
// got and whether it came over TLS; with a certificate and key it serves TLS.
const hostEcho = `
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("%s tls=%s" % (self.headers["Host"], sys.argv[2] != "-")).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
srv = http.server.HTTPServer(("0.0.0.0", int(sys.argv[1])), H)
if sys.argv[2] != "-":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
`

// TestMaskRequestHostAndHTTPSPorts: network.maskRequestHost is the Host a
// sandbox port gets (with ${PORT} filled in), and a port in network.httpsPorts
// is reached over TLS with the service's self-signed certificate.
func TestMaskRequestHostAndHTTPSPorts(t *testing.T) {
	s := startServer(t)
	sb := s.create(t, map[string]any{"network": map[string]any{"maskRequestHost": "${PORT}-app.example.test", "httpsPorts": []int{8443}}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	setup := "cat > /tmp/echo.py <<'EOF'\n" + hostEcho + "\nEOF\n" +
		"openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=self -keyout /tmp/k.pem -out /tmp/c.pem 2>/dev/null && " +
		"(nohup python3 /tmp/echo.py 8080 - >/dev/null 2>&1 &) && (nohup python3 /tmp/echo.py 8443 /tmp/c.pem /tmp/k.pem >/dev/null 2>&1 &) && sleep 1"
	if out, code := sb.run(ctx, t, setup); code != 0 {
		t.Fatalf("setup: %d %s", code, out)
	}
	for port, want := range map[string]string{"8080": "8080-app.example.test tls=False", "8443": "8443-app.example.test tls=True"} {
		hc := &http.Client{Transport: &sandboxTransport{id: sb.ID, port: port}}
		resp, err := hc.Get("http://" + s.Addr + "/")
		if err != nil {
			t.Fatalf("port %s: %v", port, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != want {
			t.Fatalf("port %s: %d %q, want %q", port, resp.StatusCode, body, want)
		}
	}
}
