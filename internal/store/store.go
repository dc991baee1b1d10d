// Package store persists Cubby's control-plane state in SQLite (modernc.org/sqlite,
// pure Go): sandbox records, API keys, teams, secrets, snapshots,
// volumes and template builds. The database runs in WAL mode
// with a busy timeout so the server and CLI commands can share it, and its schema
// is versioned with PRAGMA user_version (see migrations).
//
// Timestamps are stored as unix milliseconds (INTEGER); zero time.Time values are
// stored as NULL where a column is optional.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// ErrNotFound is returned when a record does not exist (or, for sandboxes, when
// the requested transition does not apply because the sandbox is killed).
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a state transition does not apply to the record's
// current state (e.g. pausing a paused sandbox).
var ErrConflict = errors.New("state conflict")

// busyTimeout is how long a connection waits for a competing writer (ms).
const busyTimeout = 10000

// Store is a handle on the SQLite database. It is safe for concurrent use.
type Store struct {
	db *sql.DB
}

// fileMode is the mode of the database and its -wal and -shm files: they hold
// API key hashes, the access tokens and env vars of live sandboxes.
const fileMode = 0o600

// Open opens (creating if needed) the database file at path, enables WAL, a busy
// timeout, foreign keys and secure_delete (deleted content is overwritten) on
// every connection, and applies pending schema migrations. The database file
// and its -wal and -shm files are made 0600 (owner only) whether or not they
// existed. Errors wrap the failing step.
func Open(ctx context.Context, path string) (*Store, error) {
	if err := createPrivate(path); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "secure_delete(1)")
	q.Set("_txlock", "immediate")
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	s := &Store{db: db}
	if err := s.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	if err := restrictFiles(path); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// createPrivate creates an empty database file with fileMode when none exists,
// so SQLite (which gives -wal and -shm the mode of the database) never creates
// one readable by others.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, fileMode)
	if err != nil {
		return fmt.Errorf("create sqlite %s: %w", path, err)
	}
	return f.Close()
}

// restrictFiles makes the database and its -wal and -shm files (those that
// exist) fileMode.
func restrictFiles(path string) error {
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, fileMode); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("restrict %s: %w", p, err)
		}
	}
	return nil
}

// TruncateWAL checkpoints every WAL frame into the database file and truncates
// the WAL to zero bytes, so content that writes replaced (e.g. the secrets
// MarkKilled drops) survives in neither file: secure_delete zeroes it in the
// database pages. It waits (busy timeout) for readers of older snapshots and
// returns an error when one still kept the WAL busy.
func (s *Store) TruncateWAL(ctx context.Context) error {
	var busy, logFrames, done int
	err := s.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logFrames, &done)
	if err != nil {
		return fmt.Errorf("checkpoint wal: %w", err)
	}
	if busy != 0 {
		return errors.New("checkpoint wal: a reader or writer kept it busy")
	}
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	return nil
}

// Close closes the database.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close sqlite: %w", err)
	}
	return nil
}

// toMS converts t to unix milliseconds.
func toMS(t time.Time) int64 { return t.UnixMilli() }

// fromMS converts unix milliseconds to a UTC time.
func fromMS(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// nullMS maps the zero time to NULL.
func nullMS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: toMS(t), Valid: true}
}

// fromNullMS maps NULL to the zero time.
func fromNullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMS(v.Int64)
}
