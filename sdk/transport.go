package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// errRequestTimeout is the context cause of an expired RequestTimeout.
var errRequestTimeout = errors.New("request timeout")

// maxRateLimitRetries is how often a control-plane request is retried after a
// 429 with an integer Retry-After (docs/wire/e2b-api.md §1.6).
const maxRateLimitRetries = 3

// httpClient returns the client every request of one Sandbox (or one
// package-level call) goes through, and a func releasing its idle connections
// (a no-op for a caller-provided client).
func (c *config) newHTTPClient() (*http.Client, func()) {
	hc, closeIdle := c.httpClient, func() {}
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 16
		hc, closeIdle = &http.Client{Transport: tr}, tr.CloseIdleConnections
	}
	if c.logger != nil {
		hc = &http.Client{Transport: &logTransport{base: baseTransport(hc), log: c.logger}, CheckRedirect: hc.CheckRedirect, Jar: hc.Jar}
	}
	return hc, closeIdle
}

// logTransport logs each request's method, URL, status and time to response
// headers at debug level. It never logs headers (they carry keys and tokens).
type logTransport struct {
	base http.RoundTripper
	log  *slog.Logger
}

// RoundTrip forwards r and logs its outcome.
func (t *logTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.base.RoundTrip(r)
	attrs := []any{"method", r.Method, "url", r.URL.Redacted(), "ms", time.Since(start).Milliseconds()}
	if r.Header.Get("E2b-Sandbox-Id") != "" {
		attrs = append(attrs, "sandbox", r.Header.Get("E2b-Sandbox-Id"), "port", r.Header.Get("E2b-Sandbox-Port"))
	}
	if err != nil {
		t.log.Debug("e2b request failed", append(attrs, "err", err)...)
	} else {
		t.log.Debug("e2b request", append(attrs, "status", resp.StatusCode)...)
	}
	return resp, err
}

// requestContext bounds ctx by the request timeout (none when 0). The cause of
// an expired timeout is errRequestTimeout.
func (c *config) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.requestTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, c.requestTimeout, errRequestTimeout)
}

// transportError classifies a failed round trip: the caller's context, the
// request timeout, or an unreachable server.
func (c *config) transportError(ctx, rctx context.Context, op, url string, err error) error {
	if ctx.Err() != nil {
		return ctxError(op, ctx.Err())
	}
	if errors.Is(context.Cause(rctx), errRequestTimeout) {
		return &TimeoutError{
			Message: fmt.Sprintf("%s: no response within %s; raise ConnectionOptions.RequestTimeout", op, c.requestTimeout),
			Err:     context.DeadlineExceeded,
		}
	}
	return &ConnectionError{URL: url, Err: err}
}

// headerTransport sets fixed headers on every request it forwards.
type headerTransport struct {
	base    http.RoundTripper
	headers http.Header
}

// RoundTrip forwards a copy of r with the headers set.
func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

// baseTransport is the RoundTripper of hc (http.DefaultTransport when nil).
func baseTransport(hc *http.Client) http.RoundTripper {
	if hc.Transport != nil {
		return hc.Transport
	}
	return http.DefaultTransport
}

// withHeaders returns a client sharing hc's transport that adds headers.
func withHeaders(hc *http.Client, headers http.Header) *http.Client {
	return &http.Client{
		Transport:     &headerTransport{base: baseTransport(hc), headers: headers},
		CheckRedirect: hc.CheckRedirect,
		Jar:           hc.Jar,
	}
}

// retryDoer retries control-plane requests answered with 429 and an integer
// Retry-After, like the JS SDK (docs/wire/e2b-api.md §1.6). Requests with a body must be
// replayable (GetBody), which http.NewRequest ensures for the generated
// client's bytes bodies.
type retryDoer struct {
	hc *http.Client
}

// Do sends r, retrying after 429 responses as described on retryDoer.
func (d retryDoer) Do(r *http.Request) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		resp, err := d.hc.Do(r)
		if err != nil || resp.StatusCode != http.StatusTooManyRequests || attempt >= maxRateLimitRetries {
			return resp, err
		}
		secs, perr := strconv.Atoi(resp.Header.Get("Retry-After"))
		if perr != nil || secs < 0 || (r.Body != nil && r.GetBody == nil) {
			return resp, nil
		}
		resp.Body.Close()
		if err := sleepCtx(r.Context(), time.Duration(secs)*time.Second); err != nil {
			return nil, err
		}
		if r.GetBody != nil {
			body, err := r.GetBody()
			if err != nil {
				return nil, err
			}
			r = r.Clone(r.Context())
			r.Body = body
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
