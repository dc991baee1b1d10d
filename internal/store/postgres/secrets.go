package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cubby-dev/cubby/internal/store"
)

const secretColumns = `id, team, name, metadata, version, value, created_at, updated_at`

// uniqueViolation is PostgreSQL's SQLSTATE for a unique constraint failure.
const uniqueViolation = "23505"

// InsertSecret adds a new secret (store.Store.InsertSecret). store.ErrConflict
// when the team already has a secret of that name (or the ID exists).
func (s *Store) InsertSecret(ctx context.Context, sec store.Secret) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO secrets (`+secretColumns+`) VALUES (`+params(1, 8)+`)`,
		sec.ID, sec.Team, sec.Name, nonNil(sec.Metadata), sec.Version, sec.Sealed, ms(sec.CreatedAt), ms(sec.UpdatedAt))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		return fmt.Errorf("secret %q: %w", sec.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("insert secret %q: %w", sec.Name, err)
	}
	return nil
}

// GetSecret returns team's secret whose ID or name is idOrName (names matched
// lower-cased). store.ErrNotFound when the team has none.
func (s *Store) GetSecret(ctx context.Context, team, idOrName string) (store.Secret, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+secretColumns+` FROM secrets WHERE team = $1 AND (id = $2 OR name = $3)`,
		team, idOrName, strings.ToLower(idOrName))
	sec, err := scanSecret(row)
	if errNotFound(err) {
		return store.Secret{}, fmt.Errorf("secret %q: %w", idOrName, store.ErrNotFound)
	}
	if err != nil {
		return store.Secret{}, fmt.Errorf("get secret %q: %w", idOrName, err)
	}
	return sec, nil
}

// ListSecrets returns up to limit of team's secrets ordered by name, starting
// after the name after ("" = from the first).
func (s *Store) ListSecrets(ctx context.Context, team, after string, limit int) ([]store.Secret, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+secretColumns+` FROM secrets WHERE team = $1 AND name COLLATE "C" > $2
		ORDER BY name COLLATE "C" LIMIT $3`, team, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	defer rows.Close()
	out := []store.Secret{}
	for rows.Next() {
		sec, err := scanSecret(rows)
		if err != nil {
			return nil, fmt.Errorf("list secrets: %w", err)
		}
		out = append(out, sec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	return out, nil
}

// UpdateSecret stores a new sealed value as the next version of team's secret
// id and replaces its metadata when metadata is not nil; it returns the
// updated record. store.ErrNotFound when the team has no such secret.
func (s *Store) UpdateSecret(ctx context.Context, team, id string, sealed []byte, metadata map[string]string, at time.Time) (store.Secret, error) {
	row := s.pool.QueryRow(ctx, `UPDATE secrets SET value = $3, version = version + 1, updated_at = $4,
		metadata = COALESCE($5, metadata) WHERE team = $1 AND id = $2 RETURNING `+secretColumns,
		team, id, sealed, ms(at), metadata)
	sec, err := scanSecret(row)
	if errNotFound(err) {
		return store.Secret{}, fmt.Errorf("secret %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Secret{}, fmt.Errorf("update secret %s: %w", id, err)
	}
	return sec, nil
}

// DeleteSecret removes team's secret id. store.ErrNotFound when the team has
// none. Its dead row version stays until VACUUM (see TruncateWAL).
func (s *Store) DeleteSecret(ctx context.Context, team, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM secrets WHERE team = $1 AND id = $2`, team, id)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", id, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("secret %s: %w", id, store.ErrNotFound)
	}
	return nil
}

func scanSecret(row pgx.Row) (store.Secret, error) {
	var sec store.Secret
	var created, updated time.Time
	if err := row.Scan(&sec.ID, &sec.Team, &sec.Name, &sec.Metadata, &sec.Version, &sec.Sealed, &created, &updated); err != nil {
		return store.Secret{}, err
	}
	sec.Metadata = nonNil(sec.Metadata)
	sec.CreatedAt, sec.UpdatedAt = created.UTC(), updated.UTC()
	return sec, nil
}

// SetNetwork replaces a live sandbox's network settings: allow_internet_access,
// the network config JSON (without credentials) and its sealed credentials
// (nil = none). store.ErrNotFound when the sandbox is unknown or killed.
func (s *Store) SetNetwork(ctx context.Context, id string, allowInternet *bool, network json.RawMessage, sealed []byte) error {
	var net *string
	if len(network) > 0 {
		n := string(network)
		net = &n
	}
	return s.transition(ctx, id, []store.State{store.StateRunning, store.StatePaused},
		"allow_internet_access = $3, network = $4, network_secret = $5", allowInternet, net, sealed)
}

// NetworkSecret returns the sealed network credentials of sandbox id (nil
// when it has none or is killed); store.ErrNotFound when unknown.
func (s *Store) NetworkSecret(ctx context.Context, id string) ([]byte, error) {
	var sealed []byte
	err := s.pool.QueryRow(ctx, `SELECT network_secret FROM sandboxes WHERE id = $1`, id).Scan(&sealed)
	if errNotFound(err) {
		return nil, fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read network credentials of %s: %w", id, err)
	}
	return sealed, nil
}
