package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// aborter is a connection (or stream) CloseSandbox can cut.
type aborter interface{ abort() }

// registry maps sandbox IDs to the connections currently serving them.
type registry struct {
	mu sync.Mutex
	m  map[string]map[aborter]struct{}
}

func newRegistry() *registry {
	return &registry{m: make(map[string]map[aborter]struct{})}
}

func (r *registry) add(id string, a aborter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.m[id]
	if set == nil {
		set = make(map[aborter]struct{})
		r.m[id] = set
	}
	set[a] = struct{}{}
}

func (r *registry) remove(id string, a aborter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.m[id]
	delete(set, a)
	if len(set) == 0 {
		delete(r.m, id)
	}
}

// take unregisters and returns everything registered under id.
func (r *registry) take(id string) []aborter {
	r.mu.Lock()
	set := r.m[id]
	delete(r.m, id)
	r.mu.Unlock()
	out := make([]aborter, 0, len(set))
	for a := range set {
		out = append(out, a)
	}
	return out
}

// count returns the number of registered connections (all sandboxes).
func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, set := range r.m {
		n += len(set)
	}
	return n
}

type clientConnKey struct{}

// ConnContext records the client connection in the context of its requests; install
// it as http.Server.ConnContext. Without it CloseSandbox can still abort in-flight
// requests, but HTTP/1 clients then see a FIN instead of a TCP reset.
func (g *Gateway) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, clientConnKey{}, c)
}

// clientStream is one in-flight client request for a sandbox. On HTTP/1 it owns the
// whole connection (one request at a time), which is reset on abort. On HTTP/2 the
// connection is shared with other sandboxes' streams, so only the stream is aborted.
type clientStream struct {
	conn     net.Conn // reset on abort; nil for HTTP/2 or without ConnContext
	cancel   context.CancelFunc
	killed   atomic.Bool
	complete atomic.Bool // the sandbox's whole response has been read
}

func newClientStream(r *http.Request, cancel context.CancelFunc) *clientStream {
	cs := &clientStream{cancel: cancel}
	if c, ok := r.Context().Value(clientConnKey{}).(net.Conn); ok && r.ProtoMajor < 2 {
		cs.conn = c
	}
	return cs
}

func (s *clientStream) abort() {
	if s.complete.Load() {
		// The response is complete (the client may already hold all of it and be
		// sending its next request, perhaps for another sandbox, on this keep-alive
		// connection): there is nothing left to cut.
		return
	}
	s.killed.Store(true)
	if s.conn != nil {
		resetConn(s.conn)
	}
	s.cancel()
}

// resetConn closes c so that the peer receives a TCP RST rather than a FIN: it
// unwraps TLS (skipping close_notify) and sets SO_LINGER to 0 before closing.
func resetConn(c net.Conn) {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = u.NetConn()
	}
	if l, ok := c.(interface{ SetLinger(sec int) error }); ok {
		_ = l.SetLinger(0)
	}
	_ = c.Close()
}

// trackedConn is an upstream connection registered under its sandbox until closed.
type trackedConn struct {
	net.Conn
	id  string
	reg *registry
}

// Close unregisters the connection and closes it.
func (c *trackedConn) Close() error {
	c.reg.remove(c.id, c)
	return c.Conn.Close()
}

func (c *trackedConn) abort() { _ = c.Conn.Close() }

// markCompletion is the proxy's ModifyResponse hook: it marks the client stream
// complete once the sandbox's response body has been read to its end (its declared
// length, or EOF), before the last bytes are relayed, so that CloseSandbox never
// resets a keep-alive connection whose response already finished.
func markCompletion(resp *http.Response) error {
	pt, ok := resp.Request.Context().Value(proxyTargetKey{}).(*proxyTarget)
	if !ok || pt.stream == nil || resp.StatusCode == http.StatusSwitchingProtocols {
		return nil // an upgraded connection lives on after the response
	}
	if resp.ContentLength == 0 || resp.Body == nil || resp.Body == http.NoBody {
		pt.stream.complete.Store(true)
		return nil
	}
	resp.Body = &completionBody{ReadCloser: resp.Body, left: resp.ContentLength, stream: pt.stream}
	return nil
}

// completionBody marks its stream complete when the body is exhausted.
type completionBody struct {
	io.ReadCloser
	left   int64 // bytes still expected; -1 when the length is unknown
	stream *clientStream
}

func (b *completionBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
		if b.left <= 0 {
			b.stream.complete.Store(true)
		}
	}
	if err == io.EOF {
		b.stream.complete.Store(true)
	}
	return n, err
}

// relayWriter is the client response the proxy writes to. The proxy flushes
// after every chunk it relays; once the sandbox's response has been read to its
// end (stream complete) relayWriter skips that flush, so the last bytes leave
// together with the response's end (terminating chunk or HTTP/2 END_STREAM)
// when the handler returns: one write and one client wake-up less per request,
// the same bytes. Unwrap keeps http.ResponseController (hijack for upgrades,
// deadlines) working on the underlying writer.
type relayWriter struct {
	http.ResponseWriter
	stream *clientStream
}

// FlushError flushes buffered response bytes to the client unless the
// upstream response is complete (see relayWriter).
func (w *relayWriter) FlushError() error {
	if w.stream.complete.Load() {
		return nil
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap returns the client's ResponseWriter (for http.ResponseController).
func (w *relayWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
