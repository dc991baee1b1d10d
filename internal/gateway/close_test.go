package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestCloseSandboxResetsStreams(t *testing.T) {
	e := newEnv(t)
	idA, idB := randomID(), randomID()
	hA, hB := newStreamHandler(), newStreamHandler()
	a := startSandbox(t, 0, hA)
	b := startSandbox(t, 0, hB)
	t.Cleanup(func() { close(hA.release) })
	e.cp.set(Target{ID: idA, Addr: a.addr, Running: true})
	e.cp.set(Target{ID: idB, Addr: b.addr, Running: true})

	_, bodyA := rawStream(t, e, idA, a.port)
	_, bodyB := rawStream(t, e, idB, b.port)
	wait(t, hA.started, "A start")
	wait(t, hB.started, "B start")

	e.cp.kill(idA)
	e.gw.CloseSandbox(idA)

	_, err := bodyA.ReadString('\n')
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after CloseSandbox: %v, want connection reset", err)
	}
	wait(t, hA.cancelled, "A upstream connection closed")

	// B is untouched.
	close(hB.release)
	rest, err := io.ReadAll(bodyB)
	if err != nil || string(rest) != "two\n" {
		t.Fatalf("B stream after killing A: %q %v", rest, err)
	}

	code, body, _ := do(t, e.client, e.request(t, http.MethodGet, "/health", idA, a.port, ""))
	if code != http.StatusBadGateway || body != notFoundBody(idA) {
		t.Fatalf("after kill: %d %q", code, body)
	}
}

func TestCloseSandboxBeforeResponseHeaders(t *testing.T) {
	e := newEnv(t)
	id := randomID()
	arrived, release := make(chan struct{}), make(chan struct{})
	s := startSandbox(t, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release) })
	e.cp.set(Target{ID: id, Addr: s.addr, Running: true})

	errc := make(chan error, 1)
	go func() {
		resp, err := e.client.Do(e.request(t, http.MethodPost, "/filesystem.Filesystem/Stat", id, s.port, "{}"))
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("got a response: %s", resp.Status)
		}
		errc <- err
	}()
	wait(t, arrived, "request at the sandbox")
	e.cp.kill(id)
	e.gw.CloseSandbox(id)
	select {
	case err := <-errc:
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("request cut by CloseSandbox: %v, want connection reset", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("request not cut")
	}
}

func TestCloseSandboxUpgraded(t *testing.T) {
	e := newEnv(t)
	id := randomID()
	s := startSandbox(t, 0, http.HandlerFunc(echoUpgrade))
	e.cp.set(Target{ID: id, Addr: s.addr, Running: true})

	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: echo\r\n%s: %s\r\n%s: %d\r\n\r\n",
		HeaderSandboxID, id, HeaderSandboxPort, s.port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "echo" {
		t.Fatalf("upgrade: %+v %v", resp, err)
	}
	fmt.Fprint(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo: %q %v", line, err)
	}
	e.cp.kill(id)
	e.gw.CloseSandbox(id)
	if _, err := br.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after CloseSandbox: %v, want connection reset", err)
	}
}

// echoUpgrade switches to a line echo protocol named "echo".
func echoUpgrade(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Upgrade") != "echo" {
		http.Error(w, "want upgrade", http.StatusBadRequest)
		return
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	_ = brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		fmt.Fprint(brw, line)
		if brw.Flush() != nil {
			return
		}
	}
}

func TestCloseSandboxHTTP2(t *testing.T) {
	cp := newFakeControlPlane()
	gw := New(cp, Config{}, nil)
	srv := httptest.NewUnstartedServer(gw)
	_ = srv.Listener.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0") // the httptest certificate is for 127.0.0.1
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Config.ConnContext = gw.ConnContext
	srv.EnableHTTP2 = true
	srv.StartTLS()
	client := srv.Client()
	t.Cleanup(func() {
		client.CloseIdleConnections()
		srv.Close()
		gw.CloseIdleConnections()
	})
	idA, idB := randomID(), randomID()
	hA, hB := newStreamHandler(), newStreamHandler()
	a := startSandbox(t, 0, hA)
	b := startSandbox(t, 0, hB)
	t.Cleanup(func() { close(hA.release) })
	cp.set(Target{ID: idA, Addr: a.addr, Running: true})
	cp.set(Target{ID: idB, Addr: b.addr, Running: true})

	open := func(id string, port int) *bufio.Reader {
		r, _ := http.NewRequest(http.MethodGet, srv.URL+"/stream", nil)
		r.Header.Set(HeaderSandboxID, id)
		r.Header.Set(HeaderSandboxPort, fmt.Sprint(port))
		resp, err := client.Do(r)
		if err != nil || resp.ProtoMajor != 2 {
			t.Fatalf("h2 stream: %v %v", resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		br := bufio.NewReader(resp.Body)
		if line, err := br.ReadString('\n'); err != nil || line != "one\n" {
			t.Fatalf("first chunk: %q %v", line, err)
		}
		return br
	}
	bodyA, bodyB := open(idA, a.port), open(idB, b.port)
	cp.kill(idA)
	gw.CloseSandbox(idA)
	if _, err := bodyA.ReadString('\n'); err == nil || errors.Is(err, io.EOF) || !strings.Contains(err.Error(), "stream error") {
		t.Fatalf("A after CloseSandbox: %v, want a stream reset", err)
	}
	close(hB.release)
	if rest, err := io.ReadAll(bodyB); err != nil || string(rest) != "two\n" {
		t.Fatalf("B on the same connection: %q %v", rest, err)
	}
}

// TestConcurrentNoLeak runs many requests, some of them cut by CloseSandbox, and
// checks that every registered connection is eventually unregistered.
func TestConcurrentNoLeak(t *testing.T) {
	e := newEnv(t)
	ids := []string{randomID(), randomID(), randomID()}
	for i, id := range ids {
		s := startSandbox(t, 0, echoHandler(fmt.Sprint(i)))
		e.cp.set(Target{ID: id, Addr: s.addr, Running: true})
		ids[i] = id + ":" + fmt.Sprint(s.port)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 12 {
		wg.Go(func() {
			for i := range 25 {
				id, port, _ := strings.Cut(ids[(w+i)%len(ids)], ":")
				r := e.request(t, http.MethodPost, "/x", id, atoi(port), strings.Repeat("b", i*100))
				resp, err := e.client.Do(r)
				if err != nil {
					continue // cut by a concurrent CloseSandbox
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				// 502: the request used an upstream connection that a concurrent
				// CloseSandbox closed (the test keeps the sandboxes "running").
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadGateway {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			for _, v := range ids {
				id, _, _ := strings.Cut(v, ":")
				e.gw.CloseSandbox(id)
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	e.client.CloseIdleConnections()
	deadline := time.Now().Add(waitLimit)
	for e.gw.reg.count() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still registered", e.gw.reg.count())
		}
		e.gw.CloseIdleConnections()
		time.Sleep(5 * time.Millisecond) // poll until the transport has pooled its last conns
	}
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

// TestAbortSkipsCompletedStream: once a sandbox's response has been read in full, a
// kill must not reset the keep-alive connection, which the client may already be
// reusing for a request to another sandbox.
func TestAbortSkipsCompletedStream(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	canceled := false
	cs := &clientStream{conn: server, cancel: func() { canceled = true }}
	cs.complete.Store(true)
	cs.abort()
	if cs.killed.Load() || canceled {
		t.Fatal("completed stream was aborted")
	}
	go func() { _, _ = server.Write([]byte("x")) }()
	buf := make([]byte, 1)
	if _, err := client.Read(buf); err != nil {
		t.Fatalf("connection was closed: %v", err)
	}
}
