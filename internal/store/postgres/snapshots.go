package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cubby-dev/cubby/internal/store"
)

const snapshotColumns = `id, team, name, sandbox_id, template_id, mode, size_bytes, created_at, internal`

// PutSnapshot records sn (store.Store.PutSnapshot). A named snapshot takes its
// name from the team's snapshot of that name, which is deleted in the same
// transaction: its ID is returned (else "") so the caller frees its data.
func (s *Store) PutSnapshot(ctx context.Context, sn store.Snapshot) (replaced string, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if sn.Name != "" {
			err := tx.QueryRow(ctx, `DELETE FROM snapshots WHERE team = $1 AND name = $2 RETURNING id`, sn.Team, sn.Name).Scan(&replaced)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO snapshots (`+snapshotColumns+`) VALUES (`+params(1, 9)+`)`,
			sn.ID, sn.Team, sn.Name, sn.SandboxID, sn.TemplateID, sn.Mode, sn.SizeBytes, ms(sn.CreatedAt), sn.Internal)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("put snapshot %s: %w", sn.ID, err)
	}
	return replaced, nil
}

// FindSnapshot returns team's snapshot whose ID or name is ref (the ID
// first), or store.ErrNotFound.
func (s *Store) FindSnapshot(ctx context.Context, team, ref string) (store.Snapshot, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+snapshotColumns+` FROM snapshots
		WHERE team = $1 AND (id = $2 OR (name = $2 AND name != '')) ORDER BY (id = $2) DESC LIMIT 1`, team, ref)
	sn, err := scanSnapshot(row)
	return sn, notFound(err, "snapshot "+ref)
}

// ListSnapshots returns the team's listed (not internal) snapshots matching
// f, newest first, at most f.Limit of them (store.Store.ListSnapshots).
func (s *Store) ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]store.Snapshot, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+snapshotColumns+` FROM snapshots
		WHERE team = $1 AND NOT internal
		AND ($2 = '' OR sandbox_id = $2)
		AND ($3 = '' OR id = $3 OR (name = $3 AND name != ''))
		AND ($4 = '' OR (created_at, id COLLATE "C") < (SELECT created_at, id COLLATE "C" FROM snapshots WHERE id = $4))
		ORDER BY created_at DESC, id COLLATE "C" DESC LIMIT $5`, f.Team, f.SandboxID, f.Name, f.After, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.Snapshot, error) { return scanSnapshot(r) })
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out, nil
}

// SnapshotIDs returns the IDs of every snapshot of every team.
func (s *Store) SnapshotIDs(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM snapshots`)
	if err != nil {
		return nil, fmt.Errorf("snapshot ids: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("snapshot ids: %w", err)
	}
	return ids, nil
}

// TemplateSnapshots returns how many snapshots (of any team, forks' internal
// captures left out) were taken of sandboxes of template templateID.
func (s *Store) TemplateSnapshots(ctx context.Context, templateID string) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT COUNT(*) FROM snapshots WHERE template_id = $1 AND NOT internal`, templateID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("snapshots of template %s: %w", templateID, err)
	}
	return n, nil
}

// DeleteSnapshot removes team's snapshot id or returns store.ErrNotFound.
func (s *Store) DeleteSnapshot(ctx context.Context, team, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM snapshots WHERE team = $1 AND id = $2`, team, id)
	return expectOne(tag, err, "delete snapshot "+id)
}

func scanSnapshot(row pgx.Row) (store.Snapshot, error) {
	var sn store.Snapshot
	err := row.Scan(&sn.ID, &sn.Team, &sn.Name, &sn.SandboxID, &sn.TemplateID, &sn.Mode, &sn.SizeBytes, &sn.CreatedAt, &sn.Internal)
	sn.CreatedAt = sn.CreatedAt.UTC()
	return sn, err
}
