package gateway

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestRelayWriterSkipsFinalFlush checks that the proxy's per-chunk flush goes
// through while the sandbox's response is still being read, and is skipped
// once it is complete (the server then sends the tail with the response end).
func TestRelayWriterSkipsFinalFlush(t *testing.T) {
	cs := &clientStream{}
	rec := httptest.NewRecorder()
	w := &relayWriter{ResponseWriter: rec, stream: cs}
	if _, err := w.Write([]byte("one\n")); err != nil {
		t.Fatal(err)
	}
	if err := http.NewResponseController(w).Flush(); err != nil || !rec.Flushed {
		t.Fatalf("flush while streaming: flushed=%v err=%v", rec.Flushed, err)
	}
	rec.Flushed = false
	cs.complete.Store(true)
	if _, err := w.Write([]byte("two\n")); err != nil {
		t.Fatal(err)
	}
	if err := http.NewResponseController(w).Flush(); err != nil || rec.Flushed {
		t.Fatalf("flush after completion: flushed=%v err=%v", rec.Flushed, err)
	}
	if got := rec.Body.String(); got != "one\ntwo\n" {
		t.Fatalf("body %q", got)
	}
	if http.NewResponseController(w).SetWriteDeadline(time.Time{}) == nil {
		// httptest.ResponseRecorder supports no deadlines: the controller must
		// have reached it through Unwrap and reported that.
		t.Fatal("SetWriteDeadline did not reach the recorder")
	}
}
