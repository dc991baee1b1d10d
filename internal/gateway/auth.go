package gateway

import (
	"crypto/subtle"
	"net/http"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/filesig"
)

// HeaderAccessToken carries the envd access token (docs/wire/e2b-api.md §1.4).
const HeaderAccessToken = "X-Access-Token"

// msgUnauthorized is envd's 401 message (docs/wire/e2b-api.md §1.4).
var msgUnauthorized = filesig.ErrUnsigned.Error()

// authorize checks the client's credential for a request to port of t the
// way the agent of a secured sandbox did before the gateway took it over:
// envd (EnvdPort) takes X-Access-Token on every route but GET /health and
// preflights, and on /files a URL signature instead; the code interpreter
// (agentapi.InterpreterPort) takes X-Access-Token or the traffic token on
// every route but /health. Other ports and unsecured sandboxes need nothing
// here. It returns the 401 message when the request is refused.
func authorize(r *http.Request, port int, t Target) (string, bool) {
	if t.AccessToken == "" {
		return "", true
	}
	switch {
	case port == agentapi.InterpreterPort && r.URL.Path != "/health":
		ok := equal(r.Header.Get(HeaderAccessToken), t.AccessToken) ||
			t.InterpreterToken != "" && equal(r.Header.Get(HeaderTrafficToken), t.InterpreterToken)
		return msgUnauthorized, ok
	case port != EnvdPort || r.URL.Path == "/health" || r.Method == http.MethodOptions:
		return "", true
	case r.URL.Path == "/files":
		return authorizeFiles(r, t.AccessToken)
	}
	return msgUnauthorized, equal(r.Header.Get(HeaderAccessToken), t.AccessToken)
}

// authorizeFiles is the /files check (docs/wire/envd.md §3.7): an X-Access-Token
// header, when present, must match (the signature is then ignored); without
// it the URL must carry the v1 signature of path:op:username:token
// [:signature_expiration], not expired. Methods /files does not serve pass:
// the agent answers them 405.
func authorizeFiles(r *http.Request, token string) (string, bool) {
	var op string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		op = filesig.OpRead
	case http.MethodPost:
		op = filesig.OpWrite
	default:
		return "", true
	}
	if _, present := r.Header[HeaderAccessToken]; present {
		return msgUnauthorized, equal(r.Header.Get(HeaderAccessToken), token)
	}
	if err := filesig.CheckQuery(r.URL.Query(), op, token, time.Now()); err != nil {
		return err.Error(), false
	}
	return "", true
}

func equal(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// toAgent removes the client's credentials from out (X-Access-Token, the
// traffic token, a /files URL's signature) and, for the agent's ports of a
// secured sandbox, adds the sandbox's link credential (agentapi.LinkToken),
// the only one its agent accepts. No client credential reaches a sandbox.
func toAgent(out *http.Request, port int, t Target) {
	out.Header.Del(HeaderAccessToken)
	out.Header.Del(HeaderTrafficToken)
	if port != EnvdPort && port != agentapi.InterpreterPort {
		return
	}
	if port == EnvdPort && out.URL.Path == "/files" && out.URL.RawQuery != "" {
		q := out.URL.Query()
		q.Del("signature")
		q.Del("signature_expiration")
		out.URL.RawQuery = q.Encode()
	}
	if t.AccessToken != "" {
		out.Header.Set(HeaderAccessToken, agentapi.LinkToken(t.AccessToken))
	}
}

// writeUnauthorized answers 401 {"code":401,"message":msg} as the agent
// did, with its CORS header so browsers can read it.
func writeUnauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	writeError(w, http.StatusUnauthorized, msg)
}
