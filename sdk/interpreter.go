package sdk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

// errExecTimeout is the context cause of an expired RunCode Timeout.
var errExecTimeout = errors.New("execution timeout")

// CodeContext is an isolated interpreter state (a Jupyter kernel) in which
// cells run (docs/wire/code-interpreter.md §4.1).
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CodeContextOptions configure CreateCodeContext.
type CodeContextOptions struct {
	// Language is "python" (default), "javascript"/"js", "typescript"/"ts",
	// "r", "java", "bash", or another installed Jupyter kernel name.
	Language string
	// Cwd is the working directory; default /home/user.
	Cwd string
}

// RunCodeOptions configure RunCode.
type RunCodeOptions struct {
	// Language runs the code in the default context of that language (created
	// on first use). It cannot be combined with Context. Neither: python.
	Language string
	// Context runs the code in this context, keeping state across calls.
	Context *CodeContext
	// Envs are environment variables set for this cell only.
	Envs map[string]string
	// Timeout bounds the execution: 0 means DefaultStreamTimeout (60 s),
	// NoTimeout none. When it elapses the SDK disconnects, the server
	// interrupts the cell, and RunCode returns a *TimeoutError.
	Timeout time.Duration
	// Callbacks run on the calling goroutine as lines arrive.
	OnStdout func(OutputMessage)
	OnStderr func(OutputMessage)
	OnResult func(Result)
	OnError  func(ExecutionError)
}

// RunCode runs code in the sandbox's code interpreter (POST /execute on port
// 49999, docs/wire/code-interpreter.md §4) and returns the execution; a cell that raised has
// Execution.Error set and a nil error. When the stream breaks after it
// started, the partial Execution is returned with the error. Cancelling ctx (or the Timeout)
// disconnects, which interrupts the cell on the server. Errors:
// *InvalidArgumentError (Language with Context), *NotFoundError (unknown
// context), *TimeoutError (Timeout, request timeout, or ErrSandboxKilled),
// *ConnectionError, *APIError (e.g. no code interpreter in the sandbox), and
// ctx's error.
func (s *Sandbox) RunCode(ctx context.Context, code string, opts *RunCodeOptions) (*Execution, error) {
	var o RunCodeOptions
	if opts != nil {
		o = *opts
	}
	if o.Language != "" && o.Context != nil {
		return nil, &InvalidArgumentError{Message: "RunCode: give Language or Context, not both"}
	}
	body := execapi.ExecuteRequest{Code: code, EnvVars: o.Envs}
	if o.Context != nil {
		body.ContextID = &o.Context.ID
	}
	if o.Language != "" {
		body.Language = &o.Language
	}
	ectx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if d := effectiveTimeout(o.Timeout, DefaultStreamTimeout); d > 0 {
		stop := time.AfterFunc(d, func() { cancel(errExecTimeout) }).Stop
		defer stop()
	}
	resp, err := s.ciRequest(ctx, ectx, http.MethodPost, execapi.PathExecute, body, target{ResourceContext, contextID(o.Context)})
	if err != nil {
		return nil, s.execError(ctx, ectx, o.Timeout, err)
	}
	defer resp.Body.Close()
	exec := &Execution{}
	if err := readExecution(resp.Body, exec, &o); err != nil {
		return exec, s.execError(ctx, ectx, o.Timeout, s.transportFailure(ctx, ectx, "run code", err))
	}
	return exec, nil
}

func contextID(c *CodeContext) string {
	if c == nil {
		return ""
	}
	return c.ID
}

// execError turns an error into a *TimeoutError when the RunCode Timeout
// caused it.
func (s *Sandbox) execError(ctx, ectx context.Context, timeout time.Duration, err error) error {
	if ctx.Err() == nil && errors.Is(context.Cause(ectx), errExecTimeout) {
		return &TimeoutError{
			Message: fmt.Sprintf("code execution exceeded its timeout of %s and was interrupted; pass a longer RunCodeOptions.Timeout, or NoTimeout",
				effectiveTimeout(timeout, DefaultStreamTimeout)),
			Err: context.DeadlineExceeded,
		}
	}
	return err
}

// readExecution consumes the NDJSON stream into exec, calling the callbacks.
// Lines may be long (images), so they are read without a size limit.
func readExecution(r io.Reader, exec *Execution, o *RunCodeOptions) error {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			handleLine(bytes.TrimSpace(line), exec, o)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// handleLine applies one line to exec: its type says which execapi line it
// decodes into; lines that do not decode, and types the SDK does not act on
// (keepalive, end_of_execution, future ones), are skipped.
func handleLine(line []byte, exec *Execution, o *RunCodeOptions) {
	var l execapi.Line
	if json.Unmarshal(line, &l) != nil {
		return
	}
	switch l.Type {
	case execapi.TypeExecutions:
		var n execapi.Executions
		if json.Unmarshal(line, &n) == nil {
			exec.ExecutionCount = n.ExecutionCount
		}
	case execapi.TypeStdout, execapi.TypeStderr:
		var out execapi.Output
		if json.Unmarshal(line, &out) == nil {
			output(out, exec, o)
		}
	case execapi.TypeResult:
		if r, err := parseResult(line); err == nil {
			exec.Results = append(exec.Results, r)
			call(o.OnResult, r)
		}
	case execapi.TypeError:
		var e execapi.Error
		if json.Unmarshal(line, &e) == nil && exec.Error == nil {
			exec.Error = &ExecutionError{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
			call(o.OnError, *exec.Error)
		}
	}
}

// output records a stdout or stderr chunk and calls its callback.
func output(l execapi.Output, exec *Execution, o *RunCodeOptions) {
	msg := OutputMessage{Line: l.Text, Timestamp: parseTimestamp(l.Timestamp), Error: l.Type == execapi.TypeStderr}
	if msg.Error {
		exec.Logs.Stderr = append(exec.Logs.Stderr, l.Text)
		call(o.OnStderr, msg)
	} else {
		exec.Logs.Stdout = append(exec.Logs.Stdout, l.Text)
		call(o.OnStdout, msg)
	}
}

func call[T any](f func(T), v T) {
	if f != nil {
		f(v)
	}
}

func parseTimestamp(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// CreateCodeContext creates a code context (POST /contexts). Errors:
// *InvalidArgumentError (unknown language), *TimeoutError, *ConnectionError,
// *APIError.
func (s *Sandbox) CreateCodeContext(ctx context.Context, opts *CodeContextOptions) (*CodeContext, error) {
	var body execapi.CreateContextRequest
	if opts != nil && opts.Language != "" {
		body.Language = &opts.Language
	}
	if opts != nil && opts.Cwd != "" {
		body.Cwd = &opts.Cwd
	}
	var c execapi.Context
	err := s.ciUnary(ctx, http.MethodPost, execapi.PathContexts, body, target{ResourceContext, ""}, &c)
	out := CodeContext(c)
	return &out, err
}

// ListCodeContexts lists the code contexts, including the default ones
// (GET /contexts). Errors: those of CreateCodeContext.
func (s *Sandbox) ListCodeContexts(ctx context.Context) ([]CodeContext, error) {
	var list []execapi.Context
	err := s.ciUnary(ctx, http.MethodGet, execapi.PathContexts, nil, target{ResourceContext, ""}, &list)
	if list == nil {
		return nil, err
	}
	out := make([]CodeContext, len(list))
	for i, c := range list {
		out[i] = CodeContext(c)
	}
	return out, err
}

// RestartCodeContext restarts a context's kernel, losing its state
// (POST /contexts/{id}/restart). Errors: *NotFoundError and those of
// CreateCodeContext.
func (s *Sandbox) RestartCodeContext(ctx context.Context, id string) error {
	return s.ciUnary(ctx, http.MethodPost, execapi.ContextPath(id)+execapi.PathRestart, nil, target{ResourceContext, id}, nil)
}

// RemoveCodeContext removes a context (DELETE /contexts/{id}). Errors:
// *NotFoundError and those of CreateCodeContext.
func (s *Sandbox) RemoveCodeContext(ctx context.Context, id string) error {
	return s.ciUnary(ctx, http.MethodDelete, execapi.ContextPath(id), nil, target{ResourceContext, id}, nil)
}

// ciUnary runs a request/response call of the code interpreter under the
// request timeout; out (if non-nil) receives the JSON body.
func (s *Sandbox) ciUnary(ctx context.Context, method, path string, body any, t target, out any) error {
	rctx, cancel := s.cfg.requestContext(ctx)
	defer cancel()
	resp, err := s.ciRequest(ctx, rctx, method, path, body, t)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return s.transportFailure(ctx, rctx, strings.ToLower(method)+" "+path, err)
	}
	if out == nil {
		return nil
	}
	return decodeBody(path, raw, out)
}

// ciRequest sends a request to the code interpreter (port 49999, docs/wire/code-interpreter.md
// §4.1); the request timeout bounds the time to response headers. Both the
// access token and the traffic token (when the server returned them) go on
// every route: E2B needs the access token on /execute, a Cubby server accepts
// either on every route of a secured sandbox, and the traffic token also
// passes the gateway of a sandbox created with AllowPublicTraffic false.
func (s *Sandbox) ciRequest(ctx, rctx context.Context, method, path string, body any, t target) (*http.Response, error) {
	op := strings.ToLower(method) + " " + path
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, &InvalidArgumentError{Message: op + ": " + err.Error()}
		}
		rd = bytes.NewReader(b)
	}
	hctx, hcancel := context.WithCancelCause(rctx)
	stop := func() bool { return true }
	if s.cfg.requestTimeout > 0 {
		stop = time.AfterFunc(s.cfg.requestTimeout, func() { hcancel(errRequestTimeout) }).Stop
	}
	req, err := http.NewRequestWithContext(hctx, method, s.cfg.directURL(s.id, s.domain, CodeInterpreterPort)+path, rd)
	if err != nil {
		stop()
		hcancel(nil)
		return nil, &InvalidArgumentError{Message: op + ": " + err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if s.accessToken != "" {
		req.Header.Set("X-Access-Token", s.accessToken)
	}
	resp, err := s.ciHTTP.Do(req)
	stop()
	if err != nil {
		hcancel(nil)
		return nil, s.transportFailure(ctx, hctx, op, err)
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { hcancel(nil) }}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, s.ciError(ctx, op, t, resp, raw)
	}
	return resp, nil
}

// ciError maps a code-interpreter error status (docs/wire/code-interpreter.md §4.1): 404 is an
// unknown context, 502 a dead sandbox or one without a code interpreter.
func (s *Sandbox) ciError(ctx context.Context, op string, t target, resp *http.Response, raw []byte) error {
	msg := errorMessage(raw)
	switch resp.StatusCode {
	case http.StatusNotFound:
		return &NotFoundError{Resource: ResourceContext, ID: t.id, Message: msg}
	case http.StatusBadRequest:
		return &InvalidArgumentError{Message: op + ": " + msg}
	case http.StatusUnauthorized, http.StatusForbidden:
		return &AuthenticationError{Message: op + ": " + msg + "; check the sandbox's access tokens"}
	case http.StatusTooManyRequests:
		return &RateLimitError{Message: op + ": " + msg, RetryAfter: retryAfter(resp.Header)}
	case http.StatusBadGateway:
		if s.probeKilled(ctx) {
			return killedError(s.id)
		}
		return &APIError{StatusCode: resp.StatusCode, Message: op + ": the code interpreter on port " + strconv.Itoa(CodeInterpreterPort) + " is not reachable (" + msg +
			"); is the sandbox from a code-interpreter template?"}
	}
	return &APIError{StatusCode: resp.StatusCode, Message: op + ": " + msg}
}
