package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Secret is one secret of a team (E2B's /secrets). The store keeps its value
// only sealed (package secretbox); it never sees the plaintext.
type Secret struct {
	ID        string            // "sec_" + random
	Team      string            // owner
	Name      string            // unique within the team, lower-case
	Metadata  map[string]string // never nil when read back
	Version   int64             // 1 at creation, +1 per update
	Sealed    []byte            // the sealed value
	CreatedAt time.Time
	UpdatedAt time.Time
}

const secretColumns = `id, team, name, metadata, version, value, created_at, updated_at`

// InsertSecret adds a new secret. ErrConflict when the team already has a
// secret of that name (or the ID exists).
func (s *Store) InsertSecret(ctx context.Context, sec Secret) error {
	meta, err := json.Marshal(nonNil(sec.Metadata))
	if err != nil {
		return fmt.Errorf("encode secret metadata: %w", err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO secrets (`+secretColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		sec.ID, sec.Team, sec.Name, string(meta), sec.Version, sec.Sealed, toMS(sec.CreatedAt), toMS(sec.UpdatedAt))
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return fmt.Errorf("secret %q: %w", sec.Name, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("insert secret %q: %w", sec.Name, err)
	}
	return nil
}

// GetSecret returns team's secret whose ID or name is idOrName (names are
// matched lower-cased). ErrNotFound when the team has none: other teams'
// secrets do not exist for it.
func (s *Store) GetSecret(ctx context.Context, team, idOrName string) (Secret, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+secretColumns+` FROM secrets WHERE team = ? AND (id = ? OR name = ?)`,
		team, idOrName, strings.ToLower(idOrName))
	sec, err := scanSecret(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Secret{}, fmt.Errorf("secret %q: %w", idOrName, ErrNotFound)
	}
	return sec, err
}

// ListSecrets returns up to limit of team's secrets ordered by name, starting
// after the name after ("" = from the first).
func (s *Store) ListSecrets(ctx context.Context, team, after string, limit int) ([]Secret, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+secretColumns+` FROM secrets WHERE team = ? AND name > ? ORDER BY name LIMIT ?`,
		team, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer func() { _ = rows.Close() }()
	out := []Secret{}
	for rows.Next() {
		sec, err := scanSecret(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, sec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
}

// UpdateSecret stores a new sealed value as the next version of team's secret
// id, and replaces its metadata when metadata is not nil. It returns the
// updated record; ErrNotFound when the team has no such secret.
func (s *Store) UpdateSecret(ctx context.Context, team, id string, sealed []byte, metadata map[string]string, at time.Time) (Secret, error) {
	q := `UPDATE secrets SET value = ?, version = version + 1, updated_at = ?`
	args := []any{sealed, toMS(at)}
	if metadata != nil {
		meta, err := json.Marshal(metadata)
		if err != nil {
			return Secret{}, fmt.Errorf("encode secret metadata: %w", err)
		}
		q += `, metadata = ?`
		args = append(args, string(meta))
	}
	res, err := s.db.ExecContext(ctx, q+` WHERE team = ? AND id = ?`, append(args, team, id)...)
	if err != nil {
		return Secret{}, fmt.Errorf("update secret %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return Secret{}, fmt.Errorf("secret %s: %w", id, ErrNotFound)
	}
	return s.GetSecret(ctx, team, id)
}

// DeleteSecret removes team's secret id (secure_delete overwrites its pages;
// TruncateWAL drops the WAL's copies). ErrNotFound when the team has none.
func (s *Store) DeleteSecret(ctx context.Context, team, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM secrets WHERE team = ? AND id = ?`, team, id)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("secret %s: %w", id, ErrNotFound)
	}
	return nil
}

func scanSecret(row rowScanner) (Secret, error) {
	var sec Secret
	var meta string
	var created, updated int64
	if err := row.Scan(&sec.ID, &sec.Team, &sec.Name, &meta, &sec.Version, &sec.Sealed, &created, &updated); err != nil {
		return Secret{}, err
	}
	if err := json.Unmarshal([]byte(meta), &sec.Metadata); err != nil {
		return Secret{}, fmt.Errorf("decode secret metadata: %w", err)
	}
	sec.Metadata = nonNil(sec.Metadata)
	sec.CreatedAt, sec.UpdatedAt = fromMS(created), fromMS(updated)
	return sec, nil
}

// SetNetwork replaces a live sandbox's network settings: allow_internet_access,
// the network config JSON (without credentials) and its sealed credentials
// (nil = none). ErrNotFound when the sandbox is unknown or killed.
func (s *Store) SetNetwork(ctx context.Context, id string, allowInternet *bool, network json.RawMessage, sealed []byte) error {
	var allow sql.NullBool
	if allowInternet != nil {
		allow = sql.NullBool{Bool: *allowInternet, Valid: true}
	}
	var net sql.NullString
	if len(network) > 0 {
		net = sql.NullString{String: string(network), Valid: true}
	}
	return s.transition(ctx, id, []State{StateRunning, StatePaused},
		"allow_internet_access = ?, network = ?, network_secret = ?", allow, net, sealed)
}

// NetworkSecret returns the sealed network credentials of sandbox id (nil
// when it has none or is killed).
func (s *Store) NetworkSecret(ctx context.Context, id string) ([]byte, error) {
	var sealed []byte
	err := s.db.QueryRowContext(ctx, `SELECT network_secret FROM sandboxes WHERE id = ?`, id).Scan(&sealed)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read network credentials of %s: %w", id, err)
	}
	return sealed, nil
}
