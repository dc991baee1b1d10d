// Package filesig computes and checks the signatures of envd's pre-signed /files
// URLs (downloadUrl/uploadUrl), as defined in shared/protocol/e2b-wire.md §3.7:
//
//	"v1_" + base64std_nopad(sha256("<path>:<operation>:<username>:<token>[:<expiration>]"))
//
// Both the agent (which validates) and the gateway (which routes signed URLs that
// carry no sandbox identity) use it.
package filesig

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strconv"
)

// Operations signed by the SDKs.
const (
	OpRead  = "read"  // GET /files
	OpWrite = "write" // POST /files
)

// Sign returns the v1 signature of a /files request. path and username are the raw
// query values (username "" when absent); expiration is unix seconds, 0 for none.
func Sign(path, operation, username, token string, expiration int64) string {
	msg := path + ":" + operation + ":" + username + ":" + token
	if expiration != 0 {
		msg += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(msg))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// Valid reports whether signature matches the request for token, in constant time.
// It does not check the expiration against the clock; callers do (E2B answers
// "signature is already expired" for a past expiration).
func Valid(signature, path, operation, username, token string, expiration int64) bool {
	want := Sign(path, operation, username, token, expiration)
	return subtle.ConstantTimeCompare([]byte(signature), []byte(want)) == 1
}
