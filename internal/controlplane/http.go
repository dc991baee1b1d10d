package controlplane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/cubby-dev/cubby/internal/admission"
	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/api/templateapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/internal/store"
)

// maxBodyBytes bounds request bodies (1 MiB).
const maxBodyBytes = 1 << 20

// httpError is an error with the HTTP status it is answered with and, where
// E2B defines one, its machine-readable error_code.
type httpError struct {
	status  int
	msg     string
	errCode string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(msg string) error { return &httpError{status: http.StatusBadRequest, msg: msg} }

// writeJSON writes v as a JSON response with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = fmt.Appendf(nil, `{"code":500,"message":%q}`, "encode response: "+err.Error())
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError writes the E2B error body {"code":status,"message":msg} (docs/wire/e2b-api.md §2.1).
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, api.Error{Code: int32(status), Message: msg})
}

// Handler returns the control-plane REST API (docs/wire/e2b-api.md §2.3). Every route needs
// X-API-KEY; every non-2xx answer, including unknown routes (404) and wrong
// methods (405), is a JSON error body.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	badRequest := func(w http.ResponseWriter, _ *http.Request, err error) {
		writeError(w, http.StatusBadRequest, err.Error())
	}
	api.HandlerWithOptions(httpAPI{s}, api.StdHTTPServerOptions{BaseRouter: mux, ErrorHandlerFunc: badRequest})
	httpAPI{s}.snapshotRoutes(mux)
	httpAPI{s}.volumeRoutes(mux)
	tpl := templateAPI{httpAPI{s}}
	templateapi.HandlerWithOptions(tpl, templateapi.StdHTTPServerOptions{BaseRouter: mux, ErrorHandlerFunc: badRequest})
	return s.authenticate(tpl.templateTagsRoute(jsonFallback(mux)))
}

// authenticate rejects requests without a valid X-API-KEY with 401 (docs/wire/e2b-api.md
// §1.4) and passes the others on with the key's team in their context.
// Template file uploads (a PUT to a URL the server signed) carry their
// authorisation in the URL instead.
func (s *Service) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && isUploadPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		key := r.Header.Get("X-API-KEY")
		if key == "" {
			writeError(w, http.StatusUnauthorized, "missing X-API-KEY header")
			return
		}
		team, ok, err := s.checkAPIKey(r.Context(), key)
		if err != nil {
			s.log.Error("check api key", "err", err)
			writeError(w, http.StatusInternalServerError, "check api key: "+err.Error())
			return
		}
		if !ok {
			writeError(w, http.StatusUnauthorized, "invalid API key")
			return
		}
		inner := r.WithContext(withTeam(r.Context(), team))
		next.ServeHTTP(w, inner)
		r.Pattern = inner.Pattern // the route the mux matched, for wrappers such as telemetry.InstrumentAPI
	})
}

// jsonFallback serves mux, turning its plain-text 404 and 405 answers for
// unmatched requests into JSON error bodies (redirects pass through).
func jsonFallback(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		h.ServeHTTP(rec, r)
		switch {
		case rec.status >= 300 && rec.status < 400:
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
		case rec.status == http.StatusMethodNotAllowed:
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
		default:
			writeError(w, http.StatusNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
		}
	})
}

// recorder captures the status and headers of the mux's built-in handlers.
type recorder struct {
	header http.Header
	status int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(status int)      { r.status = status }

// decodeBody decodes a JSON body into v. An empty body is a 400 when required
// and leaves v untouched otherwise; malformed JSON is a 400.
func decodeBody(w http.ResponseWriter, r *http.Request, v any, required bool) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &httpError{status: http.StatusRequestEntityTooLarge, msg: "request body too large"}
		}
		return badRequest("read request body: " + err.Error())
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if required {
			return badRequest("request body is required")
		}
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("malformed JSON body: " + err.Error())
	}
	return nil
}

// httpAPI implements the generated api.ServerInterface over a Service.
type httpAPI struct{ s *Service }

var _ api.ServerInterface = httpAPI{}

// fail answers err: its own status for *httpError, 429 (with Retry-After when
// known) for an *admission.Error, 501 for backend.ErrNotSupported, 400 for
// backend.ErrInvalid, 503 for backend.ErrUnavailable, 500 otherwise.
func (h httpAPI) fail(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	var ae *admission.Error
	switch {
	case errors.As(err, &he) && he.errCode != "":
		writeJSON(w, he.status, api.Error{Code: int32(he.status), Message: he.msg, ErrorCode: &he.errCode})
	case errors.As(err, &he):
		writeError(w, he.status, he.msg)
	case errors.As(err, &ae):
		if ae.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(ae.RetryAfter.Seconds()))))
		}
		writeError(w, http.StatusTooManyRequests, ae.Message)
	case errors.Is(err, backend.ErrNotSupported):
		writeError(w, http.StatusNotImplemented, err.Error())
	case errors.Is(err, backend.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, backend.ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		h.s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// ready answers 503 when the service has no backend (key-management only).
func (h httpAPI) ready(w http.ResponseWriter) bool {
	if h.s.backend == nil || h.s.templates == nil {
		writeError(w, http.StatusServiceUnavailable, "the control plane has no backend")
		return false
	}
	return true
}

// readyDecode is ready, then decodeBody of the request body into v (an empty
// body is a 400 when required); false when it has answered the request.
func (h httpAPI) readyDecode(w http.ResponseWriter, r *http.Request, v any, required bool) bool {
	if !h.ready(w) {
		return false
	}
	if err := decodeBody(w, r, v, required); err != nil {
		h.fail(w, r, err)
		return false
	}
	return true
}

// reply writes v as JSON with status, or err (non-nil) as fail does.
func (h httpAPI) reply(w http.ResponseWriter, r *http.Request, status int, v any, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, status, v)
}

// views maps records to their API views.
func views[T, V any](in []T, view func(T) V) []V {
	out := make([]V, len(in))
	for i, t := range in {
		out[i] = view(t)
	}
	return out
}

// CreateSandbox implements POST /sandboxes (v1: secured only with secure=true, default timeout 15 s).
func (h httpAPI) CreateSandbox(w http.ResponseWriter, r *http.Request, p api.CreateSandboxParams) {
	var b api.CreateSandboxJSONRequestBody
	if err := decodeBody(w, r, &b, true); err != nil {
		h.fail(w, r, err)
		return
	}
	h.create(w, r, v1Body(b), b.Secure != nil && *b.Secure, defaultTimeoutV1, p.IdempotencyKey)
}

// CreateSandboxV2 implements POST /v2/sandboxes (always secured, default timeout 300 s).
func (h httpAPI) CreateSandboxV2(w http.ResponseWriter, r *http.Request, p api.CreateSandboxV2Params) {
	var b api.CreateSandboxV2JSONRequestBody
	if err := decodeBody(w, r, &b, true); err != nil {
		h.fail(w, r, err)
		return
	}
	h.create(w, r, b, true, defaultTimeoutV2, p.IdempotencyKey)
}

// create serves both create versions; with an Idempotency-Key (E2B's SDKs ≥
// 2.61 send one when asked to) a repeated request gets the first one's sandbox.
func (h httpAPI) create(w http.ResponseWriter, r *http.Request, b api.NewSandboxV2, secure bool, def time.Duration, key *string) {
	if !h.ready(w) {
		return
	}
	if h.s.health != nil {
		if err := h.s.health(); err != nil {
			writeError(w, http.StatusServiceUnavailable, "cannot create sandboxes now: "+err.Error())
			return
		}
	}
	sp, err := h.s.specFromBody(b, secure, def)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	sp.team = teamOf(r)
	var rec store.Sandbox
	if key == nil {
		rec, err = h.s.create(r.Context(), sp)
	} else {
		rec, err = h.createOnce(r, *key, b, secure, def, sp)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, h.s.sandboxView(rec))
}

// createOnce validates the Idempotency-Key and runs an idempotent create.
func (h httpAPI) createOnce(r *http.Request, key string, b api.NewSandboxV2, secure bool, def time.Duration, sp createSpec) (store.Sandbox, error) {
	if !idempotencyKeyRe.MatchString(key) {
		return store.Sandbox{}, badRequest("Idempotency-Key must be 1–255 lowercase letters, digits and hyphens")
	}
	fp, err := fingerprint(b, secure, def)
	if err != nil {
		return store.Sandbox{}, err
	}
	return h.s.createOnce(r.Context(), idemKey{scope: idempotencyScope(r), key: key}, fp, sp)
}

// v1Body drops the v1-only `secure` field.
func v1Body(b api.NewSandbox) api.NewSandboxV2 {
	return api.NewSandboxV2{
		AllowInternetAccess: b.AllowInternetAccess, AutoPause: b.AutoPause, AutoPauseMemory: b.AutoPauseMemory,
		AutoResume: b.AutoResume, EnvVars: b.EnvVars, Iam: b.Iam, Lifecycle: b.Lifecycle, Mcp: b.Mcp,
		Metadata: b.Metadata, Network: b.Network, TemplateID: b.TemplateID, Timeout: b.Timeout,
		VolumeMounts: b.VolumeMounts,
	}
}

// ListSandboxes implements GET /sandboxes (v1: every running sandbox of the
// caller's team, metadata filter only).
func (h httpAPI) ListSandboxes(w http.ResponseWriter, r *http.Request, p api.ListSandboxesParams) {
	f := store.SandboxFilter{Team: teamOf(r), States: []store.State{store.StateRunning}, Descending: true}
	if p.Metadata != nil {
		m, err := decodeMetadataFilter(*p.Metadata)
		if err != nil {
			h.fail(w, r, badRequest(err.Error()))
			return
		}
		f.Metadata = m
	}
	recs, err := h.s.store.ListSandboxes(r.Context(), f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, listedViews(recs))
}

// ListSandboxesV2 implements GET /v2/sandboxes with the docs/wire/e2b-api.md §2.4
// semantics, over the caller's team's sandboxes.
func (h httpAPI) ListSandboxesV2(w http.ResponseWriter, r *http.Request, p api.ListSandboxesV2Params) {
	if !h.ready(w) {
		return
	}
	q, err := parseListQuery(p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	recs, next, err := h.s.list(r.Context(), teamOf(r), q)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, listedViews(recs))
}

// liveRecord returns the store record of a running or paused sandbox of the
// caller's team, or 404 (also for another team's sandbox).
func (h httpAPI) liveRecord(r *http.Request, id string) (store.Sandbox, error) {
	if !sandboxid.Valid(id) {
		return store.Sandbox{}, sandboxNotFound(id)
	}
	rec, err := h.s.store.GetSandbox(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (rec.State == store.StateKilled || !owns(recordTeam(rec), teamOf(r)))) {
		return store.Sandbox{}, sandboxNotFound(id)
	}
	return rec, err
}

// GetSandbox implements GET /sandboxes/{id} (200 SandboxDetail; 404 when killed or unknown).
func (h httpAPI) GetSandbox(w http.ResponseWriter, r *http.Request, id api.SandboxID) {
	rec, err := h.liveRecord(r, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h.s.detailView(rec, h.s.pauseModeOf(id)))
}

// KillSandbox implements DELETE /sandboxes/{id} (204; 404 when killed or unknown).
func (h httpAPI) KillSandbox(w http.ResponseWriter, r *http.Request, id api.SandboxID) {
	if !h.ready(w) {
		return
	}
	if err := h.s.kill(r.Context(), id, teamOf(r), reasonRequest); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// SetSandboxTimeout implements POST /sandboxes/{id}/timeout: the deadline becomes
// now + timeout (it may shorten it); 204.
func (h httpAPI) SetSandboxTimeout(w http.ResponseWriter, r *http.Request, id api.SandboxID) {
	if !h.ready(w) {
		return
	}
	var b struct {
		api.SetSandboxTimeoutJSONRequestBody
		Present *int32 `json:"timeout"` // detects a missing field (which would mean 0: kill now)
	}
	if err := decodeBody(w, r, &b, true); err != nil {
		h.fail(w, r, err)
		return
	}
	if b.Present == nil {
		h.fail(w, r, badRequest("timeout is required"))
		return
	}
	b.Timeout = *b.Present
	ttl, err := h.s.ttl(&b.Timeout, 0)
	if err == nil {
		err = h.s.setTimeout(r.Context(), id, teamOf(r), ttl)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ConnectSandbox implements POST /sandboxes/{id}/connect.
func (h httpAPI) ConnectSandbox(w http.ResponseWriter, r *http.Request, id api.SandboxID) {
	h.connect(w, r, id)
}

// ConnectSandboxV2 implements POST /v2/sandboxes/{id}/connect.
func (h httpAPI) ConnectSandboxV2(w http.ResponseWriter, r *http.Request, id api.SandboxID) {
	h.connect(w, r, id)
}

// connect: running → 200 (deadline only extended), paused → resumed, 201;
// killed or unknown → 404.
func (h httpAPI) connect(w http.ResponseWriter, r *http.Request, id string) {
	if !h.ready(w) {
		return
	}
	var b api.ConnectSandboxJSONRequestBody
	if err := decodeBody(w, r, &b, false); err != nil {
		h.fail(w, r, err)
		return
	}
	ttl, err := h.s.ttl(b.Timeout, defaultConnectTimeout)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	resumed, err := h.s.connect(r.Context(), id, teamOf(r), ttl)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	rec, err := h.s.store.GetSandbox(r.Context(), id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if resumed {
		status = http.StatusCreated
	}
	writeJSON(w, status, h.s.sandboxView(rec))
}

// PauseSandbox implements POST /sandboxes/{id}/pause (204; 409 already paused;
// 501 when the backend cannot pause). Body `{"memory"?: bool}`: memory kept
// unless false (see backend.PauseMode for what each runtime does).
func (h httpAPI) PauseSandbox(w http.ResponseWriter, r *http.Request, id api.SandboxID) {
	if !h.ready(w) {
		return
	}
	var b api.PauseSandboxJSONRequestBody
	if err := decodeBody(w, r, &b, false); err != nil {
		h.fail(w, r, err)
		return
	}
	keepMemory := b.Memory == nil || *b.Memory
	if err := h.s.pause(r.Context(), id, teamOf(r), keepMemory); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// GetSandboxMetrics implements GET /sandboxes/{id}/metrics?start&end (unix
// seconds; default the sandbox start and now): samples with start <= t <= end.
func (h httpAPI) GetSandboxMetrics(w http.ResponseWriter, r *http.Request, id api.SandboxID, p api.GetSandboxMetricsParams) {
	rec, err := h.liveRecord(r, id)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	sb := h.s.find(id)
	if sb == nil {
		h.fail(w, r, sandboxNotFound(id))
		return
	}
	start, end := rec.StartedAt.Unix(), time.Now().Unix()
	if p.Start != nil {
		start = *p.Start
	}
	if p.End != nil {
		end = *p.End
	}
	if start > end {
		h.fail(w, r, badRequest("start must not be after end"))
		return
	}
	writeJSON(w, http.StatusOK, metricsOf(sb, start, end))
}
