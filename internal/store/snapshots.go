package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Snapshot is a team's captured sandbox state (E2B's snapshots); its data is
// held by the backend under the same ID.
type Snapshot struct {
	ID         string // [a-z0-9]{20}
	Team       string
	Name       string // "" = unnamed; unique per team otherwise
	SandboxID  string // the sandbox it was taken from
	TemplateID string // the template that sandbox was started from
	Mode       string // backend.SnapshotMode: "filesystem" or "full"
	SizeBytes  int64  // disk space the snapshot takes
	CreatedAt  time.Time
	Internal   bool // a fork's capture: never listed, gone with the fork request
}

// SnapshotFilter selects snapshots of one team for ListSnapshots.
type SnapshotFilter struct {
	Team      string
	SandboxID string // "" = any
	Name      string // matches the name or the ID; "" = any
	After     string // ID of the last snapshot of the previous page; "" = from the start
	Limit     int    // > 0
}

const snapshotColumns = `id, team, name, sandbox_id, template_id, mode, size_bytes, created_at, internal`

// PutSnapshot records sn. A named snapshot takes its name from the team's
// snapshot of that name, which is deleted: its ID is returned (else "") so
// the caller frees its data.
func (s *Store) PutSnapshot(ctx context.Context, sn Snapshot) (replaced string, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("put snapshot %s: %w", sn.ID, err)
	}
	defer func() { _ = tx.Rollback() }()
	if sn.Name != "" {
		err := tx.QueryRowContext(ctx, `DELETE FROM snapshots WHERE team = ? AND name = ? RETURNING id`, sn.Team, sn.Name).Scan(&replaced)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return "", fmt.Errorf("put snapshot %s: %w", sn.ID, err)
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (?,?,?,?,?,?,?,?,?)`,
		sn.ID, sn.Team, sn.Name, sn.SandboxID, sn.TemplateID, sn.Mode, sn.SizeBytes, toMS(sn.CreatedAt), sn.Internal)
	if err != nil {
		return "", fmt.Errorf("put snapshot %s: %w", sn.ID, err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("put snapshot %s: %w", sn.ID, err)
	}
	return replaced, nil
}

// FindSnapshot returns team's snapshot whose ID or name is ref, or ErrNotFound.
func (s *Store) FindSnapshot(ctx context.Context, team, ref string) (Snapshot, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots
		WHERE team = ?1 AND (id = ?2 OR (name = ?2 AND name != '')) ORDER BY (id = ?2) DESC LIMIT 1`, team, ref)
	sn, err := scanSnapshot(row)
	if err != nil {
		return Snapshot{}, errNoRows(err, "snapshot "+ref)
	}
	return sn, nil
}

// ListSnapshots returns the team's listed (not internal) snapshots matching
// f, newest first, at most f.Limit of them.
func (s *Store) ListSnapshots(ctx context.Context, f SnapshotFilter) ([]Snapshot, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+snapshotColumns+` FROM snapshots
		WHERE team = ?1 AND internal = 0
		AND (?2 = '' OR sandbox_id = ?2)
		AND (?3 = '' OR id = ?3 OR (name = ?3 AND name != ''))
		AND (?4 = '' OR (created_at, id) < (SELECT created_at, id FROM snapshots WHERE id = ?4))
		ORDER BY created_at DESC, id DESC LIMIT ?5`, f.Team, f.SandboxID, f.Name, f.After, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []Snapshot
	for rows.Next() {
		sn, err := scanSnapshot(rows)
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		out = append(out, sn)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out, nil
}

// SnapshotIDs returns the IDs of every snapshot of every team.
func (s *Store) SnapshotIDs(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM snapshots`)
	if err != nil {
		return nil, fmt.Errorf("snapshot ids: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("snapshot ids: %w", err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// TemplateSnapshots returns how many snapshots (of any team, forks' internal
// captures left out) were taken of sandboxes of template templateID.
func (s *Store) TemplateSnapshots(ctx context.Context, templateID string) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM snapshots WHERE template_id = ? AND internal = 0`, templateID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("snapshots of template %s: %w", templateID, err)
	}
	return n, nil
}

// DeleteSnapshot removes team's snapshot id or returns ErrNotFound.
func (s *Store) DeleteSnapshot(ctx context.Context, team, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM snapshots WHERE team = ? AND id = ?`, team, id)
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return expectOne(res, "snapshot "+id)
}

func scanSnapshot(row rowScanner) (Snapshot, error) {
	var sn Snapshot
	var created int64
	err := row.Scan(&sn.ID, &sn.Team, &sn.Name, &sn.SandboxID, &sn.TemplateID, &sn.Mode, &sn.SizeBytes, &created, &sn.Internal)
	if err != nil {
		return Snapshot{}, err
	}
	sn.CreatedAt = fromMS(created)
	return sn, nil
}
