package sdk

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrNotFound matches (with errors.Is) every *NotFoundError: an unknown
// sandbox, file, process, code context or template.
var ErrNotFound = errors.New("not found")

// ErrSandboxKilled matches (with errors.Is) the *TimeoutError returned when
// the sandbox was killed, paused or reached its end of life while a request was
// in flight: the request failed and the sandbox's GET /health answered 502
// (docs/wire/envd.md §3.5, docs/wire/e2b-api.md §1.3).
var ErrSandboxKilled = errors.New("sandbox was killed")

// ErrNotEnoughSpace is returned when a file upload fails because the sandbox's
// disk is full (HTTP 507, docs/wire/envd.md §3.4).
var ErrNotEnoughSpace = errors.New("not enough disk space in the sandbox")

// Resource kinds reported by NotFoundError.Resource.
const (
	ResourceSandbox  = "sandbox"
	ResourceFile     = "file"
	ResourceProcess  = "process"
	ResourceContext  = "code context"
	ResourceTemplate = "template"
)

// NotFoundError reports an unknown sandbox, file, process or code context.
// errors.Is(err, ErrNotFound) is true for it.
type NotFoundError struct {
	Resource string // ResourceSandbox, ResourceFile, ResourceProcess, ResourceContext or ResourceTemplate
	ID       string // sandbox ID, path, pid or context ID
	Message  string // the server's message, if any
}

// Error implements error; the message says what to do about it.
func (e *NotFoundError) Error() string {
	var hint string
	switch e.Resource {
	case ResourceSandbox:
		hint = "it was killed, timed out or never existed; create a new one with sdk.Create"
	case ResourceFile:
		hint = "check the path (relative paths resolve against the user's home directory)"
	case ResourceProcess:
		hint = "the process has exited or the pid is wrong; list processes with Commands.List"
	case ResourceContext:
		hint = "create one with CreateCodeContext or list them with ListCodeContexts"
	case ResourceTemplate:
		hint = "check the template name or ID (`cubby template list` shows Cubby's)"
	}
	msg := fmt.Sprintf("%s %q not found", e.Resource, e.ID)
	if e.Message != "" && !strings.Contains(strings.ToLower(e.Message), "not found") {
		msg += " (" + e.Message + ")"
	}
	if hint != "" {
		msg += ": " + hint
	}
	return msg
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// AuthenticationError reports a missing or rejected API key (control plane,
// HTTP 401) or access token / user (envd, "unauthenticated").
type AuthenticationError struct {
	Message string
}

// Error implements error; the message says what to do about it.
func (e *AuthenticationError) Error() string {
	return "authentication failed: " + e.Message
}

// TimeoutError reports a request, command, watch or execution that ran out of
// time, or a sandbox that stopped while a request was in flight (then
// errors.Is(err, ErrSandboxKilled) is true). Err is the underlying cause.
type TimeoutError struct {
	Message string
	Err     error
}

// Error implements error; the message says what to do about it.
func (e *TimeoutError) Error() string { return "timeout: " + e.Message }

// Unwrap returns the cause (context.DeadlineExceeded, ErrSandboxKilled, …).
func (e *TimeoutError) Unwrap() error { return e.Err }

// InvalidArgumentError reports a request the server (or the SDK) rejected as
// malformed: HTTP 400 or Connect "invalid_argument".
type InvalidArgumentError struct {
	Message string
}

// Error implements error; the message says what to do about it.
func (e *InvalidArgumentError) Error() string { return "invalid argument: " + e.Message }

// RateLimitError reports HTTP 429 or Connect "resource_exhausted". RetryAfter
// is the server's Retry-After hint, 0 if none.
type RateLimitError struct {
	Message    string
	RetryAfter time.Duration
}

// Error implements error; the message says what to do about it.
func (e *RateLimitError) Error() string {
	msg := "rate limit exceeded: " + e.Message
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf("; retry after %s", e.RetryAfter)
	} else {
		msg += "; slow down and retry later"
	}
	return msg
}

// CommandExitError is returned by Commands.Run and CommandHandle.Wait when a
// command exits with a non-zero code (docs/wire/envd.md §3.3). ExitCode is -1 when the
// process was killed by a signal.
type CommandExitError struct {
	ExitCode int
	Stdout   string
	Stderr   string
	// Message is envd's error text, e.g. "exit status 1" or "signal: killed".
	Message string
}

// Error implements error; the message says what to do about it.
func (e *CommandExitError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = fmt.Sprintf("exit status %d", e.ExitCode)
	}
	return "command failed: " + msg
}

// ConnectionError reports that a server could not be reached at all (DNS,
// refused connection, TLS failure). Check E2B_API_URL / E2B_SANDBOX_URL and
// that the server is running.
type ConnectionError struct {
	URL string
	Err error
}

// Error implements error; the message says what to do about it.
func (e *ConnectionError) Error() string {
	return fmt.Sprintf("cannot reach %s: %v; check E2B_API_URL / E2B_SANDBOX_URL and that the server is running", e.URL, e.Err)
}

// Unwrap returns the transport error.
func (e *ConnectionError) Unwrap() error { return e.Err }

// APIError is any other error response: StatusCode is the HTTP status (or 0
// for a Connect error on a stream), Code the Connect code when there is one.
type APIError struct {
	StatusCode int
	Code       string
	Message    string
}

// Error implements error; the message says what to do about it.
func (e *APIError) Error() string {
	switch {
	case e.Code != "":
		return fmt.Sprintf("sandbox error: %s: %s", e.Code, e.Message)
	case e.StatusCode != 0:
		return fmt.Sprintf("server error: %d: %s", e.StatusCode, e.Message)
	}
	return "sandbox error: " + e.Message
}

// ctxError wraps a context error with what was being done: DeadlineExceeded
// becomes a *TimeoutError, Canceled is returned wrapped.
func ctxError(op string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &TimeoutError{Message: op + " did not finish before the context deadline", Err: context.DeadlineExceeded}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// killedError is the *TimeoutError for a sandbox that stopped mid-request.
func killedError(id string) error {
	return &TimeoutError{
		Message: fmt.Sprintf("sandbox %s was killed or reached its end of life while the request was in flight; "+
			"create a new sandbox, or extend a sandbox's life with SetTimeout", id),
		Err: ErrSandboxKilled,
	}
}
