package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cubby-dev/cubby/internal/store"
)

// GetIdempotency returns the record of scope's key created at or after since,
// or store.ErrNotFound.
func (s *Store) GetIdempotency(ctx context.Context, scope, key string, since time.Time) (store.IdempotencyRecord, error) {
	r := store.IdempotencyRecord{Scope: scope, Key: key}
	err := s.pool.QueryRow(ctx, `SELECT fingerprint, sandbox_id, created_at FROM idempotency_keys
		WHERE scope = $1 AND key = $2 AND created_at >= $3`, scope, key, ms(since)).Scan(&r.Fingerprint, &r.SandboxID, &r.CreatedAt)
	if err != nil {
		return store.IdempotencyRecord{}, notFound(err, fmt.Sprintf("idempotency key %q", key))
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return r, nil
}

// PutIdempotency stores r, replacing an older record of the same scope and
// key, and deletes the records created before expired, in one transaction.
func (s *Store) PutIdempotency(ctx context.Context, r store.IdempotencyRecord, expired time.Time) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < $1`, ms(expired)); err != nil {
			return fmt.Errorf("expire idempotency keys: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (scope, key, fingerprint, sandbox_id, created_at)
			VALUES ($1, $2, $3, $4, $5) ON CONFLICT (scope, key) DO UPDATE
			SET fingerprint = excluded.fingerprint, sandbox_id = excluded.sandbox_id, created_at = excluded.created_at`,
			r.Scope, r.Key, r.Fingerprint, r.SandboxID, ms(r.CreatedAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("put idempotency key %q: %w", r.Key, err)
	}
	return nil
}
