package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestBodyOutlivesResponseHeaders is the regression test for streams of untouched
// sandboxes dying with "terminated" under load. After writing Content-Length body
// bytes upstream, the transport reads the client body once more to check for EOF. If
// the sandbox answered in between and the response headers were relayed, the HTTP/1
// server (not in full-duplex mode) had already consumed and closed the client body:
// that last read failed, and the transport closed the upstream connection while the
// response was still streaming. The test holds the transport right after the body
// write until the client has seen the first response chunk, which makes that
// interleaving certain instead of rare.
func TestBodyOutlivesResponseHeaders(t *testing.T) {
	e := newEnv(t)
	id := randomID()
	const reqBody = "process-start-request"
	release := make(chan struct{})
	s := startSandbox(t, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, err := io.ReadAll(r.Body); err != nil || string(b) != reqBody {
			http.Error(w, fmt.Sprintf("body %q %v", b, err), http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, "one\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "two\n")
	}))
	e.cp.set(Target{ID: id, Addr: s.addr, Running: true})

	relayed := make(chan struct{})
	dial := e.gw.transport.DialContext
	e.gw.transport.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &holdAfterWrite{Conn: c, match: reqBody, hold: relayed}, nil
	}

	resp, err := e.client.Do(e.request(t, http.MethodPost, "/process.Process/Start", id, s.port, reqBody))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "one\n" {
		t.Fatalf("first chunk: %d %q %v", resp.StatusCode, line, err)
	}
	close(relayed) // the transport now finishes writing the request
	close(release) // and the sandbox finishes its response
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "two\n" {
		t.Fatalf("rest of the response: %q %v", rest, err)
	}
}

// holdAfterWrite is an upstream connection that, after writing the bytes equal to
// match (the request body), blocks the writer until hold is closed.
type holdAfterWrite struct {
	net.Conn
	match string
	hold  <-chan struct{}
	once  sync.Once
}

func (c *holdAfterWrite) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if string(p) == c.match {
		c.once.Do(func() {
			select {
			case <-c.hold:
			case <-time.After(waitLimit):
			}
		})
	}
	return n, err
}
