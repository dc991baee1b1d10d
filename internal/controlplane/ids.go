package controlplane

import (
	"crypto/rand"
	"encoding/hex"
)

// newToken returns 32 random bytes as 64 lowercase hex characters.
func newToken() string { return randomHex(32) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
