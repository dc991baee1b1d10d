// Package sandboxid makes and checks the IDs of sandboxes, and of the
// snapshots and volumes the control plane names the same way: lowercase
// letters and digits only (E2B's sandbox IDs have no '-': the gateway splits
// "<port>-<id>" hosts at the first '-', docs/wire/e2b-api.md), at most MaxLen
// characters, since an ID is a label of its hostnames and the value of its
// Pod's label on the kubernetes backend (RFC 1035 and Kubernetes label
// values: 63 characters).
package sandboxid

import "crypto/rand"

// Len is the length of the IDs New makes.
const Len = 20

// MaxLen is the longest ID Valid accepts.
const MaxLen = 63

// alphabet are the characters of an ID.
const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// New returns a fresh ID: Len characters drawn uniformly from [a-z0-9] with
// crypto/rand (bytes >= 252 are rejected to avoid modulo bias).
func New() string {
	out := make([]byte, 0, Len)
	buf := make([]byte, 32)
	for len(out) < Len {
		_, _ = rand.Read(buf) // never fails (crypto/rand aborts the program instead)
		for _, b := range buf {
			if b < 252 && len(out) < Len {
				out = append(out, alphabet[int(b)%len(alphabet)])
			}
		}
	}
	return string(out)
}

// Valid reports whether id is a well-formed ID: 1 to MaxLen characters of
// [a-z0-9].
func Valid(id string) bool {
	if id == "" || len(id) > MaxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
