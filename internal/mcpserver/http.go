package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cubby-dev/cubby/internal/apikey"
)

// KeyCheck tells whether an API key is valid: nil when it is, an error
// wrapping apikey.ErrInvalid when it is not, another error when it cannot
// tell. apikey.Checker.Check is one.
type KeyCheck func(ctx context.Context, key string) error

// Handler serves the tools over MCP streamable HTTP (POST, GET and DELETE
// on one path; MCP 2025-11-25 "Transports"). Every request needs an API key
// accepted by check, sent as X-API-KEY (like the REST API) or as
// "Authorization: Bearer <key>": without one the answer is 401. The tools of
// a session act with the key it was created with, and later requests of the
// session must carry the same key (else 403). Sessions idle for
// Config.SessionIdle are closed, which kills their sandboxes.
func (s *Service) Handler(check KeyCheck) http.Handler {
	h := mcp.NewStreamableHTTPHandler(s.serverFor, &mcp.StreamableHTTPOptions{
		SessionTimeout: s.cfg.SessionIdle,
		Logger:         s.cfg.Log,
		// Every request is authenticated by API key, which is what the
		// localhost DNS-rebinding check stands in for; keeping it would refuse
		// requests proxied to a loopback listener under a public host name.
		DisableLocalhostProtection: true,
	})
	verify := func(ctx context.Context, key string, _ *http.Request) (*auth.TokenInfo, error) {
		if err := check(ctx, key); err != nil {
			if errors.Is(err, apikey.ErrInvalid) {
				return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
			}
			return nil, err
		}
		return &auth.TokenInfo{UserID: apikey.Hash(key), Extra: map[string]any{tokenKey: key}}, nil
	}
	protected := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := apikey.FromRequest(r)
		if key == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cubby"`)
			http.Error(w, "missing API key: send X-API-KEY: <key> or Authorization: Bearer <key>", http.StatusUnauthorized)
			return
		}
		if r.Header.Get("Authorization") == "" {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+key)
		}
		protected.ServeHTTP(w, r)
	})
}

// tokenKey is the TokenInfo.Extra entry holding the request's API key.
const tokenKey = "cubby.apiKey"

// serverFor returns the MCP server acting with the request's API key (one
// per key, shared by its sessions), nil without an authenticated key.
func (s *Service) serverFor(r *http.Request) *mcp.Server {
	ti := auth.TokenInfoFromContext(r.Context())
	if ti == nil {
		return nil
	}
	key, _ := ti.Extra[tokenKey].(string)
	if key == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if srv, ok := s.servers[ti.UserID]; ok {
		return srv
	}
	conn := s.cfg.Connection
	conn.APIKey = key
	srv := s.Server(conn)
	s.servers[ti.UserID] = srv
	return srv
}
