package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cubby-dev/cubby/internal/store"
)

// InsertAPIKey adds a key, and its team when new, in one transaction.
// Duplicate IDs or hashes are errors.
func (s *Store) InsertAPIKey(ctx context.Context, k store.APIKey) error {
	if k.Team == "" {
		k.Team = store.DefaultTeam
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO teams (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`,
			k.Team, ms(k.CreatedAt)); err != nil {
			return fmt.Errorf("team %s: %w", k.Team, err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO api_keys (id, name, team, hash, mask, created_at, last_used_at, revoked_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			k.ID, k.Name, k.Team, k.Hash, k.Mask, ms(k.CreatedAt), nullTime(k.LastUsedAt), nullTime(k.RevokedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("insert api key %s: %w", k.ID, err)
	}
	return nil
}

const apiKeyColumns = `id, name, team, hash, mask, created_at, last_used_at, revoked_at`

// ListAPIKeys returns every key, revoked ones included, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context) ([]store.APIKey, error) {
	return s.queryAPIKeys(ctx, `SELECT `+apiKeyColumns+` FROM api_keys ORDER BY created_at, id`)
}

// ActiveAPIKeys returns the keys that are not revoked, oldest first.
func (s *Store) ActiveAPIKeys(ctx context.Context) ([]store.APIKey, error) {
	return s.queryAPIKeys(ctx, `SELECT `+apiKeyColumns+` FROM api_keys WHERE revoked_at IS NULL ORDER BY created_at, id`)
}

func (s *Store) queryAPIKeys(ctx context.Context, q string) ([]store.APIKey, error) {
	rows, err := s.pool.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	defer rows.Close()
	var out []store.APIKey
	for rows.Next() {
		var k store.APIKey
		var created time.Time
		var used, revoked *time.Time
		if err := rows.Scan(&k.ID, &k.Name, &k.Team, &k.Hash, &k.Mask, &created, &used, &revoked); err != nil {
			return nil, fmt.Errorf("list api keys: %w", err)
		}
		k.CreatedAt, k.LastUsedAt, k.RevokedAt = created.UTC(), fromNull(used), fromNull(revoked)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// RevokeAPIKey marks the key revoked at the given time; an already revoked
// key keeps its first revocation time. Unknown IDs: store.ErrNotFound.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2`, ms(at), id)
	return expectOne(tag, err, "revoke api key "+id)
}

// TouchAPIKey records a use of the key. Unknown IDs: store.ErrNotFound.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET last_used_at = $1 WHERE id = $2`, ms(at), id)
	return expectOne(tag, err, "touch api key "+id)
}

// expectOne turns an error into a wrapped one and "no row changed" into
// store.ErrNotFound.
func expectOne(tag pgconn.CommandTag, err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return nil
}

// ListTeams returns every team, oldest first.
func (s *Store) ListTeams(ctx context.Context) ([]store.Team, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, created_at FROM teams ORDER BY created_at, name`)
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	defer rows.Close()
	var out []store.Team
	for rows.Next() {
		var t store.Team
		if err := rows.Scan(&t.Name, &t.CreatedAt); err != nil {
			return nil, fmt.Errorf("list teams: %w", err)
		}
		t.CreatedAt = t.CreatedAt.UTC()
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return out, nil
}
