package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cubby-dev/cubby/internal/store"
)

const volumeColumns = `id, team, name, token, size_bytes, created_at`

// InsertVolume records v (store.Store.InsertVolume). Errors: store.ErrExists
// when the team has a volume named v.Name.
func (s *Store) InsertVolume(ctx context.Context, v store.Volume) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (`+params(1, 6)+`)`,
		v.ID, v.Team, v.Name, v.Token, v.SizeBytes, ms(v.CreatedAt))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		return fmt.Errorf("insert volume %s: name %q: %w", v.ID, v.Name, store.ErrExists)
	}
	if err != nil {
		return fmt.Errorf("insert volume %s: %w", v.ID, err)
	}
	return nil
}

// GetVolume returns the volume with this ID (of any team) or store.ErrNotFound.
func (s *Store) GetVolume(ctx context.Context, id string) (store.Volume, error) {
	v, err := scanVolume(s.pool.QueryRow(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE id = $1`, id))
	return v, notFound(err, "volume "+id)
}

// FindVolume returns team's volume whose ID or name is ref (the ID first), or
// store.ErrNotFound.
func (s *Store) FindVolume(ctx context.Context, team, ref string) (store.Volume, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+volumeColumns+` FROM volumes
		WHERE team = $1 AND (id = $2 OR name = $2) ORDER BY (id = $2) DESC LIMIT 1`, team, ref)
	v, err := scanVolume(row)
	return v, notFound(err, "volume "+ref)
}

// ListVolumes returns the volumes of team ("" = every team) by name (byte order).
func (s *Store) ListVolumes(ctx context.Context, team string) ([]store.Volume, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE $1 = '' OR team = $1 ORDER BY name COLLATE "C"`, team)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Volume, error) { return scanVolume(r) })
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out, nil
}

// DeleteVolume removes team's volume id or returns store.ErrNotFound.
func (s *Store) DeleteVolume(ctx context.Context, team, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM volumes WHERE team = $1 AND id = $2`, team, id)
	return expectOne(tag, err, "delete volume "+id)
}

func scanVolume(row pgx.Row) (store.Volume, error) {
	var v store.Volume
	err := row.Scan(&v.ID, &v.Team, &v.Name, &v.Token, &v.SizeBytes, &v.CreatedAt)
	v.CreatedAt = v.CreatedAt.UTC()
	return v, err
}
