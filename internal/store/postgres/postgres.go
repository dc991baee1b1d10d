// Package postgres is the PostgreSQL implementation of Cubby's record store
// (the contract of package store, checked by store/storetest), for several
// `cubby serve` replicas sharing one database: sandbox records, API keys,
// teams, secrets, snapshots, volumes and template builds. It speaks to the server through pgx (pgxpool) and
// versions its schema with goose (embedded migrations/*.sql, applied under a
// PostgreSQL advisory lock so replicas starting together migrate once).
//
// Records mean what they mean in package store. Timestamps are timestamptz at
// millisecond precision, read back in UTC. Every state transition is one
// conditional UPDATE, so replicas racing on one sandbox see exactly one winner.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/cubby-dev/cubby/internal/store"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Store is a handle on the PostgreSQL database. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

// Open connects to the database at dsn (a postgres:// URL or a key=value
// connection string, as pgx accepts), checks that it answers and applies
// pending schema migrations. Errors wrap the failing step.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse postgres dsn: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect postgres: %w", err)
	}
	s := &Store{pool: pool}
	if err := s.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// migrate applies the embedded migrations that are not applied yet.
func (s *Store) migrate(ctx context.Context) error {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate postgres: %w", err)
	}
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

// TruncateWAL is the store contract's "drop what killed sandboxes left behind"
// step (SQLite empties its write-ahead log). PostgreSQL has no per-client WAL
// to empty: this prunes the dead row versions of the sandboxes table, which
// hold the secrets MarkKilled replaced (VACUUM, skipped when another one is
// running). PostgreSQL does not zero freed space nor its own WAL segments, so
// those bytes stay on the database server's disk until overwritten; encrypt
// its volume (docs/kubernetes.md).
func (s *Store) TruncateWAL(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, "VACUUM (SKIP_LOCKED) sandboxes"); err != nil {
		return fmt.Errorf("vacuum sandboxes: %w", err)
	}
	return nil
}

// Close closes every connection.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// ms truncates t to the stored precision (milliseconds) in UTC.
func ms(t time.Time) time.Time { return t.Truncate(time.Millisecond).UTC() }

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	v := ms(t)
	return &v
}

// fromNull maps NULL to the zero time.
func fromNull(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// errNotFound reports whether err is "no rows".
func errNotFound(err error) bool { return errors.Is(err, pgxNoRows) }

// notFound maps "no rows" to store.ErrNotFound with context.
func notFound(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errNotFound(err):
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}
