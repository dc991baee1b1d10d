package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// IdempotencyRecord is the outcome of a create made with an Idempotency-Key:
// the sandbox it created for the request whose Fingerprint it stores.
type IdempotencyRecord struct {
	Scope       string    // whose key it is (e.g. a hash of the API key)
	Key         string    // the Idempotency-Key header
	Fingerprint []byte    // hash of the request it was used with
	SandboxID   string    // the sandbox the create made
	CreatedAt   time.Time // when the create finished
}

// GetIdempotency returns the record of scope's key created at or after since,
// or ErrNotFound.
func (s *Store) GetIdempotency(ctx context.Context, scope, key string, since time.Time) (IdempotencyRecord, error) {
	r := IdempotencyRecord{Scope: scope, Key: key}
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT fingerprint, sandbox_id, created_at FROM idempotency_keys
		WHERE scope = ? AND key = ? AND created_at >= ?`, scope, key, toMS(since)).Scan(&r.Fingerprint, &r.SandboxID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return IdempotencyRecord{}, fmt.Errorf("idempotency key %q: %w", key, ErrNotFound)
	}
	if err != nil {
		return IdempotencyRecord{}, fmt.Errorf("get idempotency key %q: %w", key, err)
	}
	r.CreatedAt = fromMS(created)
	return r, nil
}

// PutIdempotency stores r, replacing an older record of the same scope and key,
// and deletes the records created before expired.
func (s *Store) PutIdempotency(ctx context.Context, r IdempotencyRecord, expired time.Time) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("put idempotency key %q: %w", r.Key, err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE created_at < ?`, toMS(expired)); err != nil {
		return fmt.Errorf("expire idempotency keys: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO idempotency_keys (scope, key, fingerprint, sandbox_id, created_at)
		VALUES (?,?,?,?,?)`, r.Scope, r.Key, r.Fingerprint, r.SandboxID, toMS(r.CreatedAt)); err != nil {
		return fmt.Errorf("put idempotency key %q: %w", r.Key, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("put idempotency key %q: %w", r.Key, err)
	}
	return nil
}
