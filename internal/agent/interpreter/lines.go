package interpreter

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

// Error names the service itself produces in error lines (besides the kernels'
// own exception names).
const (
	// ErrNameTimeout: the execution exceeded Config.ExecutionTimeout.
	ErrNameTimeout = "TimeoutError"
	// ErrNameKernelDied: the kernel process exited; the context restarts itself.
	ErrNameKernelDied = "KernelDied"
	// ErrNameOutOfMemory: the kernel was killed by the sandbox's OOM killer
	// (value names the memory limit); the context restarts itself.
	ErrNameOutOfMemory = "OutOfMemoryError"
	// ErrNameRestarting: the context was restarted while the cell ran (E2B name).
	ErrNameRestarting = "ContextRestarting"
	// ErrNameDeleted: the context was deleted while the cell ran or waited.
	ErrNameDeleted = "ContextDeleted"
	// ErrNameAborted: the kernel aborted the execution (E2B name).
	ErrNameAborted = "ExecutionAborted"
	// ErrNameExit: a bash cell ended with a non-zero exit status.
	ErrNameExit = "ExitError"
	// ErrNameInternal: the service failed to run the cell (e.g. env set-up).
	ErrNameInternal = "InterpreterError"
)

// stream writes NDJSON lines to an HTTP response, flushing each line a client
// acts on at once (output, results, errors, keepalives); it emits keepalive
// lines while idle and keeps only the first error line. Lines no SDK callback
// consumes are buffered instead: number_of_executions leaves with the next
// flushed line, and end_of_execution with the response's final chunk when the
// handler returns, which saves a write (and a client wake-up) per execution
// without changing the bytes on the wire (docs/wire/code-interpreter.md). After
// suppressErrors (the service cancelled the cell) kernel errors are dropped so
// the service's own reason is the one reported. Safe for concurrent use.
type stream struct {
	mu         sync.Mutex
	w          http.ResponseWriter
	rc         *http.ResponseController
	enc        *json.Encoder
	last       time.Time
	errSent    bool
	ended      bool // end was called: no keepalive may follow
	suppress   bool
	writeErr   error
	onWriteErr func()
}

func newStream(w http.ResponseWriter, onWriteErr func()) *stream {
	return &stream{w: w, rc: http.NewResponseController(w), enc: json.NewEncoder(w), onWriteErr: onWriteErr}
}

// start sends the headers at once (clients time only the wait for headers).
func (s *stream) start() {
	s.w.Header().Set("Content-Type", "application/x-ndjson")
	s.w.Header().Set("Cache-Control", "no-store")
	s.w.WriteHeader(http.StatusOK)
	s.mu.Lock()
	s.flushLocked()
	s.mu.Unlock()
}

func (s *stream) flushLocked() {
	if err := s.rc.Flush(); err != nil && s.writeErr == nil {
		s.writeErr = err
		if s.onWriteErr != nil {
			go s.onWriteErr()
		}
	}
	s.last = time.Now()
}

// write encodes one line and flushes it (json.Encoder adds the newline;
// strings never hold raw newlines because JSON escapes them).
func (s *stream) write(v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeLocked(v)
}

func (s *stream) writeLocked(v any) {
	if s.bufferLocked(v) {
		s.flushLocked()
	}
}

// bufferLocked encodes one line into the response buffer without flushing it;
// false when the stream has failed.
func (s *stream) bufferLocked(v any) bool {
	if s.writeErr != nil {
		return false
	}
	if err := s.enc.Encode(v); err != nil {
		s.writeErr = err
		if s.onWriteErr != nil {
			go s.onWriteErr()
		}
		return false
	}
	return true
}

// buffer encodes one line without flushing it.
func (s *stream) buffer(v any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bufferLocked(v)
}

// keepalive writes a keepalive line when nothing was written for at least d.
func (s *stream) keepalive(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended && time.Since(s.last) >= d {
		s.writeLocked(execapi.Marker{Type: execapi.TypeKeepalive})
	}
}

// executions buffers the number_of_executions line: clients only read it into
// the final Execution, so it waits for the next flushed line.
func (s *stream) executions(n int) {
	s.buffer(execapi.NewExecutions(n))
}

// output writes a stdout/stderr line (typ execapi.TypeStdout or TypeStderr);
// ts is ISO 8601 ("" = now).
func (s *stream) output(typ, text, ts string) {
	if text == "" {
		return
	}
	if ts == "" {
		ts = time.Now().UTC().Format("2006-01-02T15:04:05.000000Z07:00")
	}
	s.write(execapi.Output{Text: text, Timestamp: ts, Type: typ})
}

func (s *stream) result(data map[string]json.RawMessage, main bool) {
	s.write(execapi.NewResult(data, main))
}

// kernelError writes an error raised by the user's code, unless one was sent
// or the service is reporting its own reason.
func (s *stream) kernelError(name, value string, traceback []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errSent || s.suppress {
		return
	}
	s.errSent = true
	s.writeLocked(execapi.NewError(name, value, strings.Join(traceback, "")))
}

// serviceError writes an error produced by the service; it replaces nothing
// already sent but wins over kernel errors suppressed since suppressErrors.
func (s *stream) serviceError(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errSent {
		return
	}
	s.errSent = true
	s.writeLocked(execapi.NewError(name, value, ""))
}

// suppressErrors drops later kernel errors (e.g. the KeyboardInterrupt caused by
// a timeout) so that the service's reason is reported.
func (s *stream) suppressErrors() {
	s.mu.Lock()
	s.suppress = true
	s.mu.Unlock()
}

// end buffers the end_of_execution line; the HTTP server sends it together
// with the response's terminating chunk once the handler returns, so the
// caller must return promptly after end.
func (s *stream) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	s.bufferLocked(execapi.Marker{Type: execapi.TypeEnd})
}

// failed reports whether a write to the client failed.
func (s *stream) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeErr != nil
}
