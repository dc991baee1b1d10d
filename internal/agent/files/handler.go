// Package files serves envd's plain-HTTP file transfer endpoint, GET and POST
// /files (docs/wire/envd.md), including its own access check by
// token or URL signature. Uploads never leave a partial file behind: data
// goes to a temporary file in the destination directory that is renamed into place
// only when complete.
package files

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agent/users"
)

// Handler serves /files. Create it with NewHandler.
type Handler struct {
	settings *settings.Settings
	log      *slog.Logger
}

// NewHandler returns the /files handler for the sandbox configured by s. It
// checks access itself (X-Access-Token or a v1 signature when the sandbox is
// secured), so the caller's token middleware must let /files through.
// GET (and HEAD) download, POST uploads; other methods get 405.
func NewHandler(s *settings.Settings, log *slog.Logger) http.Handler {
	return &Handler{settings: s, log: log}
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var op string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		op = "read"
	case http.MethodPost:
		op = "write"
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	if msg, ok := h.authorize(r, op); !ok {
		writeError(w, http.StatusUnauthorized, msg)
		return
	}
	u, err := h.user(r)
	if err != nil {
		if errors.Is(err, users.ErrUnknownUser) {
			writeError(w, http.StatusUnauthorized, err.Error())
		} else {
			writeError(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	if op == "read" {
		h.download(w, r, u)
		return
	}
	h.upload(w, r, u)
}

// user resolves the request's sandbox user: the `username` query, else the
// Basic auth username, else the sandbox default (docs/wire/envd.md).
func (h *Handler) user(r *http.Request) (*users.User, error) {
	name := r.URL.Query().Get("username")
	if name == "" {
		if n, ok, err := users.FromBasicAuth(r.Header); err == nil && ok {
			name = n
		}
	}
	if name == "" {
		name = h.settings.User()
	}
	return users.Lookup(name)
}

// writeError answers with envd's REST error body {"code":<status>,"message":"…"}
// and Content-Type application/json; charset=utf-8 (docs/wire/envd.md).
func writeError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Del("Content-Disposition")
	h.Del("Content-Encoding")
	writeJSON(w, status, struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

// writeJSON answers with v as compact JSON (no trailing newline).
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"code":500,"message":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
