// Package filesig computes and checks the signatures of envd's pre-signed /files
// URLs (downloadUrl/uploadUrl), as docs/wire/envd.md §3.7 describes them:
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
	"errors"
	"net/url"
	"strconv"
	"time"
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

// Refusals of CheckQuery; their texts are envd's 401 messages (docs/wire/envd.md §3.7).
var (
	// ErrUnsigned: the query carries no signature.
	ErrUnsigned = errors.New("unauthorized access, please provide a valid access token or method signing if supported")
	// ErrInvalid: the signature (or its expiration) does not match.
	ErrInvalid = errors.New("invalid signature")
	// ErrExpired: a valid signature whose expiration is past.
	ErrExpired = errors.New("signature is already expired")
)

// CheckQuery checks the signature of a /files request for operation with
// query q (path, username, signature, signature_expiration) against token:
// nil when it is valid and not expired at now, else ErrUnsigned, ErrInvalid
// or ErrExpired.
func CheckQuery(q url.Values, operation, token string, now time.Time) error {
	sig := q.Get("signature")
	if sig == "" {
		return ErrUnsigned
	}
	var exp int64
	if raw := q.Get("signature_expiration"); raw != "" {
		v, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return ErrInvalid
		}
		exp = v
	}
	if !Valid(sig, q.Get("path"), operation, q.Get("username"), token, exp) {
		return ErrInvalid
	}
	if exp != 0 && exp < now.Unix() {
		return ErrExpired
	}
	return nil
}
