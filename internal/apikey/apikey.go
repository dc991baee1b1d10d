// Package apikey checks API keys the way any client sees them: through the
// public control-plane API (an authenticated GET /v2/sandboxes?limit=1 with
// the key), so a key is valid exactly when the server's REST API accepts it.
// Positive answers are remembered for a short time; every request made with
// the key afterwards is still checked by the API itself, so a revoked key
// stops working there at once.
package apikey

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// ErrInvalid is returned (wrapped) for a key the server rejects.
var ErrInvalid = errors.New("invalid API key")

// DefaultTTL is how long a positive answer is remembered.
const DefaultTTL = 30 * time.Second

// maxKeyLen bounds the keys checked (longer ones are rejected unsent).
const maxKeyLen = 256

// Checker checks keys against one server. Safe for concurrent use.
type Checker struct {
	conn sdk.ConnectionOptions
	ttl  time.Duration
	now  func() time.Time

	mu    sync.Mutex
	valid map[string]time.Time // key hash -> expiry of the positive answer
}

// NewChecker returns a Checker asking the API at conn (its APIKey is
// ignored) and remembering positive answers for ttl (0: DefaultTTL).
func NewChecker(conn sdk.ConnectionOptions, ttl time.Duration) *Checker {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Checker{conn: conn, ttl: ttl, now: time.Now, valid: map[string]time.Time{}}
}

// Hash is the hex SHA-256 of key: an identity of the key safe to keep and log.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Check returns nil when the server accepts key, an error wrapping
// ErrInvalid when it rejects it, and another error when it cannot tell (the
// server is unreachable or failed).
func (c *Checker) Check(ctx context.Context, key string) error {
	if key == "" || len(key) > maxKeyLen || strings.ContainsAny(key, " \t\r\n") {
		return fmt.Errorf("%w: malformed", ErrInvalid)
	}
	h := Hash(key)
	c.mu.Lock()
	exp, ok := c.valid[h]
	c.mu.Unlock()
	if ok && c.now().Before(exp) {
		return nil
	}
	conn := c.conn
	conn.APIKey = key
	p := sdk.NewSandboxPaginator(&sdk.ListOptions{ConnectionOptions: conn, Limit: 1})
	_, err := p.NextItems(ctx)
	var auth *sdk.AuthenticationError
	switch {
	case errors.As(err, &auth):
		c.mu.Lock()
		delete(c.valid, h)
		c.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrInvalid, auth.Message)
	case err != nil:
		return fmt.Errorf("check API key: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.valid { // drop expired answers so the map stays small
		if !c.now().Before(e) {
			delete(c.valid, k)
		}
	}
	c.valid[h] = c.now().Add(c.ttl)
	return nil
}

// FromRequest returns the API key of an HTTP request: the X-API-KEY header
// (as the REST API takes it), else an "Authorization: Bearer" token (as MCP
// clients send one). "" when there is none.
func FromRequest(r *http.Request) string {
	if k := r.Header.Get("X-API-KEY"); k != "" {
		return k
	}
	if f := strings.Fields(r.Header.Get("Authorization")); len(f) == 2 && strings.EqualFold(f[0], "bearer") {
		return f[1]
	}
	return ""
}
