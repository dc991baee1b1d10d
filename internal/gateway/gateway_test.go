package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/filesig"
)

// waitLimit only guards against hangs; no test asserts on durations.
const waitLimit = 20 * time.Second

// echoHandler answers with the sandbox name and what it received.
func echoHandler(name string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "sbx=%s method=%s uri=%s host=%s hid=%s traffic=%q access=%q body=%s",
			name, r.Method, r.RequestURI, r.Host, r.Header.Get(HeaderSandboxID), r.Header.Get(HeaderTrafficToken),
			r.Header.Get(HeaderAccessToken), body)
	}
}

func do(t *testing.T, c *http.Client, r *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, string(b), resp.Header
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestHeaderRouting(t *testing.T) {
	e := newEnv(t)
	idA, idB := randomID(), randomID()
	a := startSandbox(t, 0, echoHandler("A"))
	b := startSandbox(t, 0, echoHandler("B"))
	e.cp.set(Target{ID: idA, Addr: a.addr, Running: true})
	e.cp.set(Target{ID: idB, Addr: b.addr, Running: true})

	code, body, _ := do(t, e.client, e.request(t, http.MethodPost, "/process.Process/Start?x=1", idA, a.port, "hello"))
	want := fmt.Sprintf("sbx=A method=POST uri=/process.Process/Start?x=1 host=%s hid=%s traffic=\"\" access=\"\" body=hello", e.srv.Listener.Addr(), idA)
	if code != http.StatusOK || body != want {
		t.Fatalf("A: %d %q, want 200 %q", code, body, want)
	}
	code, body, _ = do(t, e.client, e.request(t, http.MethodGet, "/health", idB, b.port, ""))
	if code != http.StatusOK || !strings.HasPrefix(body, "sbx=B method=GET uri=/health") {
		t.Fatalf("B: %d %q", code, body)
	}
	code, body, _ = do(t, e.client, e.request(t, http.MethodGet, "/v2/sandboxes", "", 0, ""))
	if code != http.StatusOK || body != "api" {
		t.Fatalf("api: %d %q", code, body)
	}
}

func TestHostRouting(t *testing.T) {
	e := newEnv(t)
	id := randomID()
	s := startSandbox(t, 0, echoHandler("H"))
	e.cp.set(Target{ID: id, Addr: s.addr, Running: true})

	host := fmt.Sprintf("%d-%s.example.test", s.port, id)
	r := e.request(t, http.MethodGet, "/index.html", "", 0, "")
	r.Host = host
	code, body, _ := do(t, e.client, r)
	if code != http.StatusOK || !strings.HasPrefix(body, "sbx=H method=GET uri=/index.html host="+host+" ") {
		t.Fatalf("host route: %d %q", code, body)
	}
	r = e.request(t, http.MethodGet, "/v2/sandboxes", "", 0, "")
	r.Host = "api.example.test"
	if code, body, _ := do(t, e.client, r); code != http.StatusOK || body != "api" {
		t.Fatalf("api host: %d %q", code, body)
	}
}

func TestOneHeaderOnly(t *testing.T) {
	e := newEnv(t)
	r := e.request(t, http.MethodGet, "/health", "", 0, "")
	r.Header.Set(HeaderSandboxID, randomID())
	code, body, h := do(t, e.client, r)
	want := `{"code":400,"message":"both E2b-Sandbox-Id and E2b-Sandbox-Port headers are required"}`
	if code != http.StatusBadRequest || body != want || h.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %q %q", code, body, h.Get("Content-Type"))
	}
	r = e.request(t, http.MethodGet, "/health", randomID(), 0, "")
	r.Header.Set(HeaderSandboxPort, "99999")
	if code, body, _ := do(t, e.client, r); code != http.StatusBadRequest || !strings.HasPrefix(body, `{"code":400,"message":"invalid E2b-Sandbox-Port`) {
		t.Fatalf("bad port: %d %q", code, body)
	}
}

func notFoundBody(id string) string {
	return `{"sandboxId":"` + id + `","message":"The sandbox was not found","code":502}`
}

func TestNotFound(t *testing.T) {
	e := newEnv(t)
	paused, dead := randomID(), randomID()
	s := startSandbox(t, 0, echoHandler("P"))
	e.cp.set(Target{ID: paused, Addr: s.addr, Running: false})
	ln := listenLoopback(t, 0) // reserve an address+port, then free it: dials are refused
	deadAddr := ln.Addr().(*net.TCPAddr)
	_ = ln.Close()
	e.cp.set(Target{ID: dead, Addr: mustAddr(deadAddr.IP.String()), Running: true})

	for _, tc := range []struct {
		name, id string
		port     int
	}{
		{"unknown", randomID(), 49983},
		{"paused", paused, s.port},
		{"refused", dead, deadAddr.Port},
		{"invalid id", "bad_id", 49983},
	} {
		code, body, h := do(t, e.client, e.request(t, http.MethodGet, "/health", tc.id, tc.port, ""))
		if code != http.StatusBadGateway || body != notFoundBody(tc.id) || h.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q %q", tc.name, code, body, h.Get("Content-Type"))
		}
	}
}

func TestTrafficToken(t *testing.T) {
	e := newEnv(t)
	id := randomID()
	app := startSandbox(t, 0, echoHandler("app"))
	envd := startSandbox(t, EnvdPort, echoHandler("envd"))
	if app.addr == envd.addr {
		t.Skip("address collision")
	}
	// Two records for one sandbox ID cannot coexist; use two IDs with the same token policy.
	idEnvd := randomID()
	e.cp.set(Target{ID: id, Addr: app.addr, Running: true, TrafficToken: "tt-secret"})
	e.cp.set(Target{ID: idEnvd, Addr: envd.addr, Running: true, TrafficToken: "tt-secret"})

	for _, tc := range []struct {
		token string
		want  int
	}{{"", http.StatusForbidden}, {"wrong", http.StatusForbidden}, {"tt-secret", http.StatusOK}} {
		r := e.request(t, http.MethodGet, "/contexts", id, app.port, "")
		if tc.token != "" {
			r.Header.Set("E2B-Traffic-Access-Token", tc.token)
		}
		code, body, _ := do(t, e.client, r)
		if code != tc.want {
			t.Fatalf("token %q: %d %q, want %d", tc.token, code, body, tc.want)
		}
		if code == http.StatusForbidden && body != `{"code":403,"message":"missing or invalid traffic access token"}` {
			t.Fatalf("403 body %q", body)
		}
		if code == http.StatusOK && !strings.Contains(body, `traffic=""`) {
			t.Fatalf("traffic token forwarded to the sandbox: %q", body)
		}
	}
	code, body, _ := do(t, e.client, e.request(t, http.MethodGet, "/health", idEnvd, EnvdPort, ""))
	if code != http.StatusOK || !strings.HasPrefix(body, "sbx=envd") {
		t.Fatalf("envd port without traffic token: %d %q", code, body)
	}
	r := e.request(t, http.MethodGet, "/health", idEnvd, EnvdPort, "")
	r.Header.Set("E2B-Traffic-Access-Token", "tt-secret")
	if code, body, _ := do(t, e.client, r); code != http.StatusOK || !strings.Contains(body, `traffic=""`) {
		t.Fatalf("traffic token forwarded to envd: %d %q", code, body)
	}
}

// TestGatewayChecksClientCredentials: the gateway checks the clients'
// credentials of a secured sandbox's agent ports (access token, the code
// interpreter's traffic token, signed /files URLs) and forwards only the
// sandbox's link credential; the link credential itself opens nothing, and
// no client credential reaches the sandbox.
func TestGatewayChecksClientCredentials(t *testing.T) {
	e := newEnv(t)
	envd := startSandbox(t, EnvdPort, echoHandler("envd"))
	ci := startSandbox(t, agentapi.InterpreterPort, echoHandler("ci"))
	public, private, ciID := randomID(), randomID(), randomID()
	e.cp.set(Target{ID: public, Addr: envd.addr, Running: true, AccessToken: "at", InterpreterToken: "it"})
	e.cp.set(Target{ID: ciID, Addr: ci.addr, Running: true, AccessToken: "at", InterpreterToken: "it"})
	e.cp.set(Target{ID: private, Addr: ci.addr, Running: true, AccessToken: "at", TrafficToken: "it", InterpreterToken: "it"})
	link := func(string) string { return agentapi.LinkToken("at") }
	sig := url.QueryEscape(filesig.Sign("/a", filesig.OpRead, "", "at", 0))
	for _, tc := range []struct {
		name, id, path  string
		port            int
		access, traffic string
		want            int
	}{
		{"envd token", public, "/envs", EnvdPort, "at", "", http.StatusOK},
		{"envd none", public, "/envs", EnvdPort, "", "", http.StatusUnauthorized},
		{"envd wrong", public, "/envs", EnvdPort, "nope", "", http.StatusUnauthorized},
		{"envd link", public, "/envs", EnvdPort, link(public), "", http.StatusUnauthorized},
		{"envd traffic", public, "/envs", EnvdPort, "", "it", http.StatusUnauthorized},
		{"envd health", public, "/health", EnvdPort, "", "", http.StatusOK},
		{"files signed", public, "/files?path=%2Fa&signature=" + sig, EnvdPort, "", "", http.StatusOK},
		{"files bad signature", public, "/files?path=%2Fb&signature=" + sig, EnvdPort, "", "", http.StatusUnauthorized},
		{"ci traffic", ciID, "/contexts", agentapi.InterpreterPort, "", "it", http.StatusOK},
		{"ci access", ciID, "/contexts", agentapi.InterpreterPort, "at", "", http.StatusOK},
		{"ci none", ciID, "/contexts", agentapi.InterpreterPort, "", "", http.StatusUnauthorized},
		{"ci link", ciID, "/contexts", agentapi.InterpreterPort, link(ciID), "", http.StatusUnauthorized},
		{"ci health", ciID, "/health", agentapi.InterpreterPort, "", "", http.StatusOK},
		{"private traffic", private, "/contexts", agentapi.InterpreterPort, "", "it", http.StatusOK},
		{"private none", private, "/contexts", agentapi.InterpreterPort, "at", "", http.StatusForbidden},
	} {
		r := e.request(t, http.MethodGet, tc.path, tc.id, tc.port, "")
		if tc.access != "" {
			r.Header.Set("X-Access-Token", tc.access)
		}
		if tc.traffic != "" {
			r.Header.Set("E2B-Traffic-Access-Token", tc.traffic)
		}
		code, body, _ := do(t, e.client, r)
		if code != tc.want {
			t.Errorf("%s: %d %q, want %d", tc.name, code, body, tc.want)
			continue
		}
		if code != http.StatusOK {
			continue
		}
		if want := fmt.Sprintf("traffic=\"\" access=%q", link(tc.id)); !strings.Contains(body, want) ||
			strings.Contains(body, "signature") {
			t.Errorf("%s: the sandbox got %q, want only %s", tc.name, body, want)
		}
	}
}

func TestSignedFilesRouting(t *testing.T) {
	e := newEnv(t)
	names := []string{"A", "B", "C"}
	ids := map[string]string{}
	for _, n := range names {
		s := startSandbox(t, EnvdPort, echoHandler(n))
		ids[n] = randomID()
		e.cp.set(Target{ID: ids[n], Addr: s.addr, Running: true, AccessToken: "token-" + n})
	}
	paused := randomID()
	e.cp.set(Target{ID: paused, Addr: mustAddr("127.0.0.1"), Running: false, AccessToken: "token-P"})

	get := func(tok string) string {
		return "/files?path=%2Fhome%2Fuser%2Fa.txt&signature=" + url.QueryEscape(filesig.Sign("/home/user/a.txt", filesig.OpRead, "", tok, 0))
	}
	for _, n := range names {
		code, body, _ := do(t, e.client, e.request(t, http.MethodGet, get("token-"+n), "", 0, ""))
		if code != http.StatusOK || !strings.HasPrefix(body, "sbx="+n+" method=GET uri=/files?path=") {
			t.Fatalf("GET signed for %s: %d %q", n, code, body)
		}
	}
	exp := time.Now().Add(time.Hour).Unix()
	sig := filesig.Sign("/tmp/up.bin", filesig.OpWrite, "user", "token-C", exp)
	post := fmt.Sprintf("/files?path=/tmp/up.bin&username=user&signature_expiration=%d&signature=%s", exp, url.QueryEscape(sig))
	code, body, _ := do(t, e.client, e.request(t, http.MethodPost, post, "", 0, "payload"))
	if code != http.StatusOK || !strings.HasPrefix(body, "sbx=C method=POST") || !strings.HasSuffix(body, "body=payload") {
		t.Fatalf("POST signed for C: %d %q", code, body)
	}

	if code, body, _ := do(t, e.client, e.request(t, http.MethodGet, get("token-P"), "", 0, "")); code != http.StatusBadGateway || body != notFoundBody(paused) {
		t.Fatalf("paused: %d %q", code, body)
	}
	for name, target := range map[string]string{
		"unsigned":    "/files?path=/a",
		"unknown key": get("token-X"),
		"wrong op":    "/files?path=%2Fhome%2Fuser%2Fa.txt&signature=" + url.QueryEscape(filesig.Sign("/home/user/a.txt", filesig.OpWrite, "", "token-A", 0)),
	} {
		code, body, _ := do(t, e.client, e.request(t, http.MethodGet, target, "", 0, ""))
		if code != http.StatusUnauthorized || !strings.HasPrefix(body, `{"code":401,"message":`) {
			t.Errorf("%s: %d %q", name, code, body)
		}
	}
}

// streamHandler writes "one\n", flushes, signals started, and writes "two\n" after
// release; when the request is cancelled instead it signals cancelled.
type streamHandler struct {
	started, release, cancelled chan struct{}
}

func newStreamHandler() *streamHandler {
	h := &streamHandler{started: make(chan struct{}, 16), release: make(chan struct{}), cancelled: make(chan struct{}, 16)}
	return h
}

func (h *streamHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/x-ndjson")
	fmt.Fprint(w, "one\n")
	http.NewResponseController(w).Flush()
	h.started <- struct{}{}
	select {
	case <-h.release:
		fmt.Fprint(w, "two\n")
	case <-r.Context().Done():
		h.cancelled <- struct{}{}
	}
}

func TestStreamingResponse(t *testing.T) {
	e := newEnv(t)
	id := randomID()
	h := newStreamHandler()
	s := startSandbox(t, 0, h)
	released := false
	t.Cleanup(func() {
		if !released {
			close(h.release)
		}
	})
	e.cp.set(Target{ID: id, Addr: s.addr, Running: true})

	resp, err := e.client.Do(e.request(t, http.MethodPost, "/execute", id, s.port, `{"code":"1"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "one\n" {
		t.Fatalf("first chunk: %q %v", line, err)
	}
	// The upstream is still blocked: the first chunk arrived before it finished.
	close(h.release)
	released = true
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "two\n" {
		t.Fatalf("rest: %q %v", rest, err)
	}
}

func TestRequestBodyStreamed(t *testing.T) {
	e := newEnv(t)
	id := randomID()
	gotPart1 := make(chan struct{})
	s := startSandbox(t, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 5)
		if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "part1" {
			http.Error(w, fmt.Sprintf("part1: %q %v", buf, err), http.StatusInternalServerError)
			close(gotPart1)
			return
		}
		close(gotPart1) // the client has not sent part2 yet: nothing was buffered
		rest, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s+%s", buf, rest)
	}))
	e.cp.set(Target{ID: id, Addr: s.addr, Running: true})

	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte("part1"))
		<-gotPart1
		_, _ = pw.Write([]byte("part2"))
		_ = pw.Close()
	}()
	r := e.request(t, http.MethodPost, "/files?path=/big", id, s.port, "")
	r.Body = pr
	code, body, _ := do(t, e.client, r)
	if code != http.StatusOK || body != "part1+part2" {
		t.Fatalf("got %d %q", code, body)
	}
}

func TestClientDisconnectCancelsUpstream(t *testing.T) {
	e := newEnv(t)
	id := randomID()
	h := newStreamHandler()
	s := startSandbox(t, 0, h)
	t.Cleanup(func() { close(h.release) })
	e.cp.set(Target{ID: id, Addr: s.addr, Running: true})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := e.request(t, http.MethodPost, "/execute", id, s.port, `{"code":"while True: pass"}`).WithContext(ctx)
	resp, err := e.client.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "one\n" {
		t.Fatalf("first chunk: %q %v", line, err)
	}
	wait(t, h.started, "upstream start")
	cancel() // closes the client connection
	wait(t, h.cancelled, "upstream request cancellation")
}

// rawStream opens a raw TCP connection to the gateway, sends a header-routed GET and
// returns the response after reading its first line of body.
func rawStream(t *testing.T, e *testEnv, id string, port int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	fmt.Fprintf(c, "GET /stream HTTP/1.1\r\nHost: gw\r\n%s: %s\r\n%s: %d\r\n\r\n", HeaderSandboxID, id, HeaderSandboxPort, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("stream response: %v %v", resp, err)
	}
	body := bufio.NewReader(resp.Body)
	if line, err := body.ReadString('\n'); err != nil || line != "one\n" {
		t.Fatalf("first chunk: %q %v", line, err)
	}
	return c, body
}

func TestWithoutQuery(t *testing.T) {
	err := &url.Error{Op: "Get", URL: "http://10.77.0.2:49983/files?path=a&signature=v1_secret&signature_expiration=9", Err: io.EOF}
	got := withoutQuery(fmt.Errorf("proxy: %w", err))
	if strings.Contains(got.Error(), "secret") || !strings.Contains(got.Error(), "/files") || !errors.Is(got, io.EOF) {
		t.Fatalf("withoutQuery = %v", got)
	}
	plain := errors.New("dial tcp: refused")
	if withoutQuery(plain) != plain {
		t.Fatal("an error without a URL changed")
	}
}

// TestUpstreamBoundToHostIface: upstream connections are bound to the target's
// host interface; a target whose interface is gone is unreachable (502 not
// found) rather than dialed over whatever route its address has.
func TestUpstreamBoundToHostIface(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SO_BINDTODEVICE needs CAP_NET_RAW on older kernels; run as root")
	}
	e := newEnv(t)
	bound, gone := randomID(), randomID()
	s := startSandbox(t, 0, echoHandler("L"))
	e.cp.set(Target{ID: bound, Addr: s.addr, HostIface: "lo", Running: true})
	e.cp.set(Target{ID: gone, Addr: s.addr, HostIface: "cbnolink0", Running: true})
	if code, body, _ := do(t, e.client, e.request(t, http.MethodGet, "/x", bound, s.port, "")); code != http.StatusOK || !strings.HasPrefix(body, "sbx=L ") {
		t.Fatalf("bound to lo: %d %q", code, body)
	}
	if code, body, _ := do(t, e.client, e.request(t, http.MethodGet, "/x", gone, s.port, "")); code != http.StatusBadGateway || body != notFoundBody(gone) {
		t.Fatalf("bound to a missing link: %d %q, want 502 not found", code, body)
	}
}

// TestEarlyAnswerReachesClient: a sandbox that answers an upload before reading
// it (507 for a body larger than its disk) gets its answer to a client that
// pauses (here 1 s, past net/http's 500 ms before it resets a connection with
// unread data) while still sending: the gateway reads the rest instead of
// resetting the connection.
func TestEarlyAnswerReachesClient(t *testing.T) {
	e := newEnv(t)
	id := randomID()
	sbx := startSandbox(t, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		http.Error(w, "not enough disk space available", http.StatusInsufficientStorage)
	}))
	e.cp.set(Target{ID: id, Addr: sbx.addr, Running: true})
	c, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitLimit))
	const size = 64 << 20
	fmt.Fprintf(c, "POST /files?path=/big HTTP/1.1\r\nHost: gw\r\n%s: %s\r\n%s: %d\r\nContent-Length: %d\r\n\r\n",
		HeaderSandboxID, id, HeaderSandboxPort, sbx.port, size)
	chunk := make([]byte, 1<<20)
	for sent := 0; sent < size; sent += len(chunk) {
		if sent == 4<<20 {
			time.Sleep(time.Second)
		}
		if _, err := c.Write(chunk); err != nil {
			t.Fatalf("write after %d MiB: %v", sent>>20, err)
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusInsufficientStorage {
		t.Fatalf("answer: %v %v", resp, err)
	}
}
