package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// APIKey is one control-plane API key. Only the SHA-256 of the key is stored.
type APIKey struct {
	ID         string
	Name       string
	Team       string    // the team the key acts for; "" is stored as DefaultTeam
	Hash       []byte    // sha256 of the full key string
	Mask       string    // e.g. "e2b_…1a2b"
	CreatedAt  time.Time //
	LastUsedAt time.Time // zero when never used
	RevokedAt  time.Time // zero unless revoked
}

// Revoked reports whether the key has been revoked.
func (k APIKey) Revoked() bool { return !k.RevokedAt.IsZero() }

// InsertAPIKey adds a key, and its team when the team does not exist yet, in
// one transaction. Duplicate IDs or hashes are errors.
func (s *Store) InsertAPIKey(ctx context.Context, k APIKey) error {
	if k.Team == "" {
		k.Team = DefaultTeam
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("insert api key %s: %w", k.ID, err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO teams (name, created_at) VALUES (?, ?) ON CONFLICT (name) DO NOTHING`,
		k.Team, toMS(k.CreatedAt)); err != nil {
		return fmt.Errorf("insert api key %s: team %s: %w", k.ID, k.Team, err)
	}
	_, err = tx.ExecContext(ctx,
		`INSERT INTO api_keys (id, name, team, hash, mask, created_at, last_used_at, revoked_at) VALUES (?,?,?,?,?,?,?,?)`,
		k.ID, k.Name, k.Team, k.Hash, k.Mask, toMS(k.CreatedAt), nullMS(k.LastUsedAt), nullMS(k.RevokedAt))
	if err != nil {
		return fmt.Errorf("insert api key %s: %w", k.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("insert api key %s: %w", k.ID, err)
	}
	return nil
}

const apiKeyColumns = `id, name, team, hash, mask, created_at, last_used_at, revoked_at`

// ListAPIKeys returns every key, revoked ones included, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context) ([]APIKey, error) {
	return s.queryAPIKeys(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
}

// ActiveAPIKeys returns the keys that are not revoked.
func (s *Store) ActiveAPIKeys(ctx context.Context) ([]APIKey, error) {
	return s.queryAPIKeys(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE revoked_at IS NULL ORDER BY created_at, id`)
}

func (s *Store) queryAPIKeys(ctx context.Context, q string) ([]APIKey, error) {
	rows, err := s.db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []APIKey
	for rows.Next() {
		var k APIKey
		var created int64
		var used, revoked sql.NullInt64
		if err := rows.Scan(&k.ID, &k.Name, &k.Team, &k.Hash, &k.Mask, &created, &used, &revoked); err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		k.CreatedAt, k.LastUsedAt, k.RevokedAt = fromMS(created), fromNullMS(used), fromNullMS(revoked)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// RevokeAPIKey marks the key revoked at the given time (idempotent: an already
// revoked key keeps its first revocation time). Unknown IDs return ErrNotFound.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, toMS(at), id)
	if err != nil {
		return fmt.Errorf("revoke api key %s: %w", id, err)
	}
	return expectOne(res, fmt.Sprintf("api key %s", id))
}

// TouchAPIKey records a use of the key.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ? WHERE id = ?`, toMS(at), id)
	if err != nil {
		return fmt.Errorf("touch api key %s: %w", id, err)
	}
	return expectOne(res, fmt.Sprintf("api key %s", id))
}

// expectOne turns "no row changed" into ErrNotFound.
func expectOne(res sql.Result, what string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return nil
}

// errNoRows maps sql.ErrNoRows to ErrNotFound with context.
func errNoRows(err error, what string) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}
