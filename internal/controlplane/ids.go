package controlplane

import (
	"crypto/rand"
	"encoding/hex"
)

// sandboxIDLen is the length of sandbox IDs (E2B wire §1.3: [a-z0-9], no '-').
const sandboxIDLen = 20

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// NewSandboxID returns a fresh sandbox ID: sandboxIDLen characters drawn uniformly from [a-z0-9]
// with crypto/rand (bytes >= 252 are rejected to avoid modulo bias).
func NewSandboxID() string {
	out := make([]byte, 0, sandboxIDLen)
	buf := make([]byte, 32)
	for len(out) < sandboxIDLen {
		_, _ = rand.Read(buf) // never fails (crypto/rand aborts the program instead)
		for _, b := range buf {
			if b < 252 && len(out) < sandboxIDLen {
				out = append(out, idAlphabet[int(b)%len(idAlphabet)])
			}
		}
	}
	return string(out)
}

// newToken returns 32 random bytes as 64 lowercase hex characters.
func newToken() string { return randomHex(32) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// validSandboxID reports whether id could be a sandbox ID ([a-z0-9], 1..64 chars).
func validSandboxID(id string) bool {
	if id == "" || len(id) > 64 {
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
