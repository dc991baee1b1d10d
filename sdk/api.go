package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/sdk/internal/apiclient"
)

// maxErrorBody caps how much of an error response is read.
const maxErrorBody = 64 << 10

// controlPlane wraps the generated REST client of the control plane (docs/wire/e2b-api.md
// §2) with the SDK's error mapping.
type controlPlane struct {
	cfg    *config
	client *apiclient.Client
}

// newControlPlane builds the control-plane client on hc. It fails with an
// *AuthenticationError when there is no API key (the JS SDK does the same
// before sending anything).
func newControlPlane(cfg *config, hc *http.Client) (*controlPlane, error) {
	if cfg.apiKey == "" {
		return nil, &AuthenticationError{Message: "no API key: set E2B_API_KEY or ConnectionOptions.APIKey"}
	}
	h := http.Header{}
	for k, v := range cfg.headers {
		h.Set(k, v)
	}
	h.Set("X-API-KEY", cfg.apiKey)
	h.Set("User-Agent", userAgent())
	client, err := apiclient.NewClient(cfg.apiURL+"/", apiclient.WithHTTPClient(retryDoer{hc: withHeaders(hc, h)}))
	if err != nil {
		return nil, &InvalidArgumentError{Message: fmt.Sprintf("API URL %q: %v", cfg.apiURL, err)}
	}
	return &controlPlane{cfg: cfg, client: client}, nil
}

// call runs one control-plane request bounded by the request timeout and
// returns the response with its body read; non-success statuses (not in ok)
// become typed errors. sandboxID names the sandbox for 404s ("" when none).
func (cp *controlPlane) call(ctx context.Context, op, sandboxID string, ok []int,
	do func(context.Context) (*http.Response, error)) (int, http.Header, []byte, error) {
	rctx, cancel := cp.cfg.requestContext(ctx)
	defer cancel()
	resp, err := do(rctx)
	if err != nil {
		return 0, nil, nil, cp.cfg.transportError(ctx, rctx, op, cp.cfg.apiURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, cp.cfg.transportError(ctx, rctx, op, cp.cfg.apiURL, err)
	}
	for _, code := range ok {
		if resp.StatusCode == code {
			return resp.StatusCode, resp.Header, body, nil
		}
	}
	return resp.StatusCode, resp.Header, body, controlPlaneError(op, sandboxID, resp, body)
}

// controlPlaneError maps a control-plane error response (docs/wire/e2b-api.md §2.1).
func controlPlaneError(op, sandboxID string, resp *http.Response, body []byte) error {
	msg := errorMessage(body)
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return &AuthenticationError{Message: fmt.Sprintf("%s: %s; check the API key (E2B_API_KEY or ConnectionOptions.APIKey)", op, msg)}
	case http.StatusNotFound:
		if sandboxID != "" {
			return &NotFoundError{Resource: ResourceSandbox, ID: sandboxID, Message: msg}
		}
		return &NotFoundError{Resource: "resource", ID: op, Message: msg}
	case http.StatusBadRequest:
		return &InvalidArgumentError{Message: op + ": " + msg}
	case http.StatusTooManyRequests:
		return &RateLimitError{Message: op + ": " + msg, RetryAfter: retryAfter(resp.Header)}
	}
	return &APIError{StatusCode: resp.StatusCode, Message: op + ": " + msg}
}

// errorMessage extracts "message" from a {"code","message"} body, falling back
// to the (truncated) body text.
func errorMessage(body []byte) string {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		return e.Message
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	if s == "" {
		return "(empty response)"
	}
	return s
}

func retryAfter(h http.Header) time.Duration {
	if secs, err := strconv.Atoi(h.Get("Retry-After")); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	return 0
}

// decodeBody unmarshals a success body into out.
func decodeBody(op string, body []byte, out any) error {
	if err := json.Unmarshal(body, out); err != nil {
		return &APIError{Message: fmt.Sprintf("%s: malformed response %q: %v", op, truncate(body, 200), err)}
	}
	return nil
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// seconds converts a duration to whole seconds, rounding up (the SDKs send
// ceil(ms/1000)).
func seconds(d time.Duration) int32 {
	return int32((d + time.Second - 1) / time.Second)
}

func (cp *controlPlane) create(ctx context.Context, body apiclient.NewSandboxV2, idempotencyKey string) (*apiclient.Sandbox, error) {
	var params apiclient.CreateSandboxV2Params
	if idempotencyKey != "" {
		params.IdempotencyKey = &idempotencyKey
	}
	_, _, b, err := cp.call(ctx, "create sandbox", "", []int{http.StatusCreated}, func(ctx context.Context) (*http.Response, error) {
		return cp.client.CreateSandboxV2(ctx, &params, body)
	})
	if err != nil {
		if nf, ok := err.(*NotFoundError); ok {
			nf.Resource, nf.ID = ResourceTemplate, deref(body.TemplateID)
		}
		return nil, err
	}
	var sb apiclient.Sandbox
	return &sb, decodeBody("create sandbox", b, &sb)
}

func (cp *controlPlane) connect(ctx context.Context, id string, timeout time.Duration) (*apiclient.Sandbox, error) {
	// Always send the timeout, like the Python SDK; servers differ in their
	// default for an empty body.
	body := apiclient.ConnectSandbox{Timeout: new(seconds(effectiveTimeout(timeout, DefaultSandboxTimeout)))}
	_, _, b, err := cp.call(ctx, "connect to sandbox", id, []int{http.StatusOK, http.StatusCreated}, func(ctx context.Context) (*http.Response, error) {
		return cp.client.ConnectSandboxV2(ctx, id, body)
	})
	if err != nil {
		return nil, err
	}
	var sb apiclient.Sandbox
	return &sb, decodeBody("connect to sandbox", b, &sb)
}

func (cp *controlPlane) get(ctx context.Context, id string) (*apiclient.SandboxDetail, error) {
	_, _, b, err := cp.call(ctx, "get sandbox info", id, []int{http.StatusOK}, func(ctx context.Context) (*http.Response, error) {
		return cp.client.GetSandbox(ctx, id)
	})
	if err != nil {
		return nil, err
	}
	var d apiclient.SandboxDetail
	return &d, decodeBody("get sandbox info", b, &d)
}

func (cp *controlPlane) kill(ctx context.Context, id string) error {
	_, _, _, err := cp.call(ctx, "kill sandbox", id, []int{http.StatusNoContent, http.StatusOK}, func(ctx context.Context) (*http.Response, error) {
		return cp.client.KillSandbox(ctx, id)
	})
	return err
}

func (cp *controlPlane) setTimeout(ctx context.Context, id string, d time.Duration) error {
	_, _, _, err := cp.call(ctx, "set sandbox timeout", id, []int{http.StatusNoContent, http.StatusOK}, func(ctx context.Context) (*http.Response, error) {
		return cp.client.SetSandboxTimeout(ctx, id, apiclient.SandboxTimeout{Timeout: seconds(d)})
	})
	return err
}

// pause returns false when the sandbox was already paused (409).
func (cp *controlPlane) pause(ctx context.Context, id string, keepMemory *bool) (bool, error) {
	status, _, _, err := cp.call(ctx, "pause sandbox", id, []int{http.StatusNoContent, http.StatusOK, http.StatusConflict}, func(ctx context.Context) (*http.Response, error) {
		return cp.client.PauseSandbox(ctx, id, apiclient.PauseSandbox{Memory: keepMemory})
	})
	return err == nil && status != http.StatusConflict, err
}

func (cp *controlPlane) metrics(ctx context.Context, id string, start, end time.Time) ([]apiclient.SandboxMetric, error) {
	var p apiclient.GetSandboxMetricsParams
	if !start.IsZero() {
		p.Start = new(start.Unix())
	}
	if !end.IsZero() {
		p.End = new(end.Unix())
	}
	_, _, b, err := cp.call(ctx, "get sandbox metrics", id, []int{http.StatusOK}, func(ctx context.Context) (*http.Response, error) {
		return cp.client.GetSandboxMetrics(ctx, id, &p)
	})
	if err != nil {
		return nil, err
	}
	var m []apiclient.SandboxMetric
	return m, decodeBody("get sandbox metrics", b, &m)
}

// list fetches one page; the second result is the X-Next-Token ("" on the last page).
func (cp *controlPlane) list(ctx context.Context, p apiclient.ListSandboxesV2Params) ([]apiclient.ListedSandbox, string, error) {
	_, h, b, err := cp.call(ctx, "list sandboxes", "", []int{http.StatusOK}, func(ctx context.Context) (*http.Response, error) {
		return cp.client.ListSandboxesV2(ctx, &p)
	})
	if err != nil {
		return nil, "", err
	}
	var out []apiclient.ListedSandbox
	return out, h.Get("X-Next-Token"), decodeBody("list sandboxes", b, &out)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
