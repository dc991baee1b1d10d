package sdk

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// target names what an envd call is about, for NotFoundError.
type target struct {
	resource string // ResourceFile, ResourceProcess, …
	id       string
}

// setUser selects the sandbox user of an RPC: Authorization: Basic
// base64("<user>:"), sent only when a user is given, or always ("user") for
// envd older than 0.4.0 (docs/wire/e2b-api.md §1.4, §2.5).
func (s *Sandbox) setUser(h http.Header, user string) {
	if user == "" && !versionAtLeast(s.envdVersion, "0.4.0") {
		user = DefaultUser
	}
	if user != "" {
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	}
}

// queryUser is the username= query value of /files requests (docs/wire/envd.md §3.4):
// the given user, or "user" for envd older than 0.4.0.
func (s *Sandbox) queryUser(user string) string {
	if user == "" && !versionAtLeast(s.envdVersion, "0.4.0") {
		return DefaultUser
	}
	return user
}

// unary runs one envd RPC under the request timeout with the user header set
// and maps its error.
func unary[Req, Res any](ctx context.Context, s *Sandbox, op, user string, t target,
	call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error), msg *Req) (*Res, error) {
	rctx, cancel := s.cfg.requestContext(ctx)
	defer cancel()
	req := connect.NewRequest(msg)
	s.setUser(req.Header(), user)
	resp, err := call(rctx, req)
	if err != nil {
		return nil, s.rpcError(ctx, rctx, op, t, err)
	}
	return resp.Msg, nil
}

// rpcError maps an envd Connect error to the SDK's typed errors (docs/wire/envd.md
// §3.5). ctx is the caller's context, rctx the one the call ran under (its
// cause tells a request timeout from the caller's deadline).
func (s *Sandbox) rpcError(ctx, rctx context.Context, op string, t target, err error) error {
	if ctx.Err() != nil {
		return ctxError(op, ctx.Err())
	}
	if errors.Is(context.Cause(rctx), errRequestTimeout) {
		return &TimeoutError{
			Message: fmt.Sprintf("%s: no response within %s; raise ConnectionOptions.RequestTimeout", op, s.cfg.requestTimeout),
			Err:     context.DeadlineExceeded,
		}
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("%s: %w", op, err)
	}
	if !connect.IsWireError(err) && ce.Code() != connect.CodeDeadlineExceeded {
		// The connection broke: the sandbox may have been killed (docs/wire/envd.md §3.5).
		if s.probeKilled(ctx) {
			return killedError(s.id)
		}
		return &ConnectionError{URL: s.cfg.envdURL(s.id, s.domain), Err: err}
	}
	msg := ce.Message()
	switch ce.Code() {
	case connect.CodeNotFound:
		return &NotFoundError{Resource: t.resource, ID: t.id, Message: msg}
	case connect.CodeInvalidArgument:
		return &InvalidArgumentError{Message: op + ": " + msg}
	case connect.CodeUnauthenticated:
		return &AuthenticationError{Message: op + ": " + msg + "; check the user name and the sandbox's access token"}
	case connect.CodeResourceExhausted:
		return &RateLimitError{Message: op + ": " + msg}
	case connect.CodeDeadlineExceeded:
		return &TimeoutError{Message: op + " exceeded its timeout; pass a longer Timeout, or NoTimeout", Err: context.DeadlineExceeded}
	case connect.CodeUnavailable:
		if s.probeKilled(ctx) {
			return killedError(s.id)
		}
		return &TimeoutError{Message: op + ": sandbox unavailable (" + msg + "), likely due to the sandbox timeout"}
	}
	return &APIError{Code: ce.Code().String(), Message: op + ": " + msg}
}

// keepalivePingInterval is the Keepalive-Ping-Interval (seconds) the SDKs
// send on streams (docs/wire/envd.md §3.1).
const keepalivePingInterval = "50"

// setStreamHeaders sets the headers of a server-streaming RPC.
func (s *Sandbox) setStreamHeaders(h http.Header, user string) {
	s.setUser(h, user)
	h.Set("Keepalive-Ping-Interval", keepalivePingInterval)
}

// streamContext returns the context of a stream that should outlive ctx:
// it keeps ctx's values, ends after timeout (0 = DefaultStreamTimeout,
// negative = never; connect-go sends the deadline as Connect-Timeout-Ms, which
// envd uses as the process or watch lifetime, docs/wire/envd.md §3.1), and until
// handshakeDone is called it is also cancelled by ctx and by the request
// timeout (cause errRequestTimeout). cancel ends the stream.
func (s *Sandbox) streamContext(ctx context.Context, timeout time.Duration) (sctx context.Context, cancel context.CancelFunc, handshakeDone func()) {
	base := context.WithoutCancel(ctx)
	var cancelT context.CancelFunc
	if d := effectiveTimeout(timeout, DefaultStreamTimeout); d > 0 {
		base, cancelT = context.WithTimeout(base, d)
	} else {
		base, cancelT = context.WithCancel(base)
	}
	hctx, hcancel := context.WithCancelCause(base)
	stopCtx := context.AfterFunc(ctx, func() { hcancel(context.Cause(ctx)) })
	stopTimer := func() bool { return true }
	if s.cfg.requestTimeout > 0 {
		stopTimer = time.AfterFunc(s.cfg.requestTimeout, func() { hcancel(errRequestTimeout) }).Stop
	}
	return hctx, func() { hcancel(context.Canceled); cancelT() }, func() { stopCtx(); stopTimer() }
}
