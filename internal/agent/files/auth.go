package files

import (
	"net/http"
	"time"

	"github.com/cubby-dev/cubby/internal/filesig"
)

// msgUnauthorized is envd's generic 401 message (docs/wire/envd.md).
var msgUnauthorized = filesig.ErrUnsigned.Error()

// authorize applies the /files access check for operation op ("read" or "write") and
// returns the 401 message when access is refused. Unsecured sandboxes accept
// every request. Otherwise an X-Access-Token header, when present, must match
// (the signature is then ignored); without it, `signature` must be the v1
// signature of path:op:username:token[:signature_expiration] and the expiration
// (unix seconds) must not be in the past.
func (h *Handler) authorize(r *http.Request, op string) (string, bool) {
	token := h.settings.AccessToken()
	if token == "" {
		return "", true
	}
	if _, present := r.Header["X-Access-Token"]; present {
		if h.settings.CheckToken(r.Header.Get("X-Access-Token")) {
			return "", true
		}
		return msgUnauthorized, false
	}
	if err := filesig.CheckQuery(r.URL.Query(), op, token, time.Now()); err != nil {
		return err.Error(), false
	}
	return "", true
}
