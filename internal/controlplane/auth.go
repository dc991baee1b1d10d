package controlplane

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

// apiKeyPrefix and apiKeyHexLen define the key format: "e2b_" + 40 lowercase hex
// characters, which the Python SDK's format check accepts (docs/wire/e2b-api.md §1.1).
const (
	apiKeyPrefix = "e2b_"
	apiKeyHexLen = 40
)

// touchEvery throttles last_used_at writes per key.
const touchEvery = time.Minute

// ErrKeyNotFound is returned (wrapped) by RevokeAPIKey for an unknown key ID.
var ErrKeyNotFound = errors.New("api key not found")

// CreateAPIKey creates and stores a new API key named name for the default
// team (store.DefaultTeam); see CreateTeamAPIKey.
func (s *Service) CreateAPIKey(ctx context.Context, name string) (string, store.APIKey, error) {
	return s.CreateTeamAPIKey(ctx, name, store.DefaultTeam)
}

// CreateTeamAPIKey creates and stores a new API key named name that acts for
// team (created when new) and returns the key (shown once; only its SHA-256
// is stored) and its record. Errors: ErrInvalidTeam (wrapped), store errors.
func (s *Service) CreateTeamAPIKey(ctx context.Context, name, team string) (string, store.APIKey, error) {
	if err := validTeam(team); err != nil {
		return "", store.APIKey{}, err
	}
	key := apiKeyPrefix + randomHex(apiKeyHexLen/2)
	sum := sha256.Sum256([]byte(key))
	rec := store.APIKey{
		ID: "key_" + randomHex(6), Name: name, Team: team, Hash: sum[:],
		Mask:      apiKeyPrefix + "…" + key[len(key)-4:],
		CreatedAt: time.Now().UTC(),
	}
	if err := s.store.InsertAPIKey(ctx, rec); err != nil {
		return "", store.APIKey{}, fmt.Errorf("create api key: %w", err)
	}
	return key, rec, nil
}

// ListAPIKeys returns every stored key (revoked ones included), oldest first.
func (s *Service) ListAPIKeys(ctx context.Context) ([]store.APIKey, error) {
	return s.store.ListAPIKeys(ctx)
}

// RevokeAPIKey revokes the key with this ID; it stops authenticating at once.
// Unknown IDs return an error wrapping ErrKeyNotFound.
func (s *Service) RevokeAPIKey(ctx context.Context, id string) error {
	err := s.store.RevokeAPIKey(ctx, id, time.Now())
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("revoke %s: %w", id, ErrKeyNotFound)
	}
	return err
}

// EnsureAPIKey creates a key named "default" when no active key exists (first
// start) and returns it with created=true so `serve` can print it once.
// Otherwise it returns "", false.
func (s *Service) EnsureAPIKey(ctx context.Context) (key string, created bool, err error) {
	active, err := s.store.ActiveAPIKeys(ctx)
	if err != nil {
		return "", false, fmt.Errorf("ensure api key: %w", err)
	}
	if len(active) > 0 {
		return "", false, nil
	}
	key, _, err = s.CreateAPIKey(ctx, "default")
	if err != nil {
		return "", false, err
	}
	return key, true, nil
}

// checkAPIKey returns the team key acts for: the default team for
// CUBBY_API_KEY, the key's team for an active stored key; ok is false for any
// other key. Each comparison is constant-time; every active key is compared.
// Keys are read from the store on every call, so keys created or revoked by
// `cubby keys` while the server runs count at once.
func (s *Service) checkAPIKey(ctx context.Context, key string) (team string, ok bool, err error) {
	if s.cfg.EnvAPIKey != "" && subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.EnvAPIKey)) == 1 {
		return store.DefaultTeam, true, nil
	}
	active, err := s.store.ActiveAPIKeys(ctx)
	if err != nil {
		return "", false, err
	}
	sum := sha256.Sum256([]byte(key))
	var match *store.APIKey
	for i, k := range active {
		if subtle.ConstantTimeCompare(k.Hash, sum[:]) == 1 {
			match = &active[i]
		}
	}
	if match == nil {
		return "", false, nil
	}
	s.touch(ctx, match.ID)
	if match.Team == "" {
		return store.DefaultTeam, true, nil
	}
	return match.Team, true, nil
}

// touch records a key use at most once per touchEvery.
func (s *Service) touch(ctx context.Context, id string) {
	now := time.Now()
	s.touchMu.Lock()
	last, ok := s.lastTouch[id]
	if ok && now.Sub(last) < touchEvery {
		s.touchMu.Unlock()
		return
	}
	s.lastTouch[id] = now
	s.touchMu.Unlock()
	if err := s.store.TouchAPIKey(ctx, id, now); err != nil {
		s.log.Warn("record api key use", "key", id, "err", err)
	}
}
