package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Volume is a team's persistent volume (E2B's volumes); its files are held by
// the backend under the same ID.
type Volume struct {
	ID        string // [a-z0-9]{20}
	Team      string
	Name      string // ^[a-zA-Z0-9_-]+$, unique per team
	Token     string // bearer token of the volume content API
	SizeBytes int64  // quota
	CreatedAt time.Time
}

// ErrExists is returned when a record with the same unique key exists.
var ErrExists = errors.New("already exists")

const volumeColumns = `id, team, name, token, size_bytes, created_at`

// InsertVolume records v. Errors: ErrExists when the team has a volume named v.Name.
func (s *Store) InsertVolume(ctx context.Context, v Volume) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (?,?,?,?,?,?)`,
		v.ID, v.Team, v.Name, v.Token, v.SizeBytes, toMS(v.CreatedAt))
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return fmt.Errorf("insert volume %s: name %q: %w", v.ID, v.Name, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("insert volume %s: %w", v.ID, err)
	}
	return nil
}

// GetVolume returns the volume with this ID (of any team) or ErrNotFound.
func (s *Store) GetVolume(ctx context.Context, id string) (Volume, error) {
	v, err := scanVolume(s.db.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE id = ?`, id))
	if err != nil {
		return Volume{}, errNoRows(err, "volume "+id)
	}
	return v, nil
}

// FindVolume returns team's volume whose ID or name is ref, or ErrNotFound.
func (s *Store) FindVolume(ctx context.Context, team, ref string) (Volume, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes
		WHERE team = ?1 AND (id = ?2 OR name = ?2) ORDER BY (id = ?2) DESC LIMIT 1`, team, ref)
	v, err := scanVolume(row)
	if err != nil {
		return Volume{}, errNoRows(err, "volume "+ref)
	}
	return v, nil
}

// ListVolumes returns the volumes of team ("" = every team) by name.
func (s *Store) ListVolumes(ctx context.Context, team string) ([]Volume, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE ?1 = '' OR team = ?1 ORDER BY name`, team)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []Volume
	for rows.Next() {
		v, err := scanVolume(rows)
		if err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// DeleteVolume removes team's volume id or returns ErrNotFound.
func (s *Store) DeleteVolume(ctx context.Context, team, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM volumes WHERE team = ? AND id = ?`, team, id)
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	return expectOne(res, "volume "+id)
}

func scanVolume(row rowScanner) (Volume, error) {
	var v Volume
	var created int64
	if err := row.Scan(&v.ID, &v.Team, &v.Name, &v.Token, &v.SizeBytes, &created); err != nil {
		return Volume{}, err
	}
	v.CreatedAt = fromMS(created)
	return v, nil
}
