package files

import (
	"net/http"
	"strconv"
	"time"

	"github.com/cubby-dev/cubby/internal/filesig"
)

// 401 messages of the /files access check (E2B wire §3.7; the first is envd's
// generic unauthorized message of §1.4).
const (
	msgUnauthorized     = "unauthorized access, please provide a valid access token or method signing if supported"
	msgInvalidSignature = "invalid signature"
	msgExpired          = "signature is already expired"
)

// authorize applies the §3.7 check for operation op ("read" or "write") and
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
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return msgUnauthorized, false
	}
	var exp int64
	if raw := q.Get("signature_expiration"); raw != "" {
		v, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return msgInvalidSignature, false
		}
		exp = v
	}
	if !filesig.Valid(sig, q.Get("path"), op, q.Get("username"), token, exp) {
		return msgInvalidSignature, false
	}
	if exp != 0 && exp < time.Now().Unix() {
		return msgExpired, false
	}
	return "", true
}
