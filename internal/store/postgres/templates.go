package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cubby-dev/cubby/internal/store"
)

const templateColumns = `id, name, aliases, digest, rootfs_dir, built_at, size_bytes`

// PutTemplate inserts or replaces the template with t.ID.
func (s *Store) PutTemplate(ctx context.Context, t store.Template) error {
	if t.Aliases == nil {
		t.Aliases = []string{}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, aliases = excluded.aliases, digest = excluded.digest,
		rootfs_dir = excluded.rootfs_dir, built_at = excluded.built_at, size_bytes = excluded.size_bytes`,
		t.ID, t.Name, t.Aliases, t.Digest, t.RootfsDir, ms(t.BuiltAt), t.SizeBytes)
	if err != nil {
		return fmt.Errorf("put template %s: %w", t.ID, err)
	}
	return nil
}

// GetTemplate returns the template with this exact ID or store.ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, id string) (store.Template, error) {
	t, err := scanTemplate(s.pool.QueryRow(ctx, `SELECT `+templateColumns+` FROM templates WHERE id = $1`, id))
	return t, notFound(err, "template "+id)
}

// FindTemplate returns the template whose ID, name or one of whose aliases
// equals ref (IDs win over names, names over aliases, the newest build wins a
// tie), or store.ErrNotFound.
func (s *Store) FindTemplate(ctx context.Context, ref string) (store.Template, error) {
	t, err := scanTemplate(s.pool.QueryRow(ctx, `SELECT `+templateColumns+` FROM templates
		WHERE id = $1 OR name = $1 OR aliases ? $1
		ORDER BY (id = $1) DESC, (name = $1) DESC, built_at DESC LIMIT 1`, ref))
	return t, notFound(err, "template "+ref)
}

// ListTemplates returns every template ordered by name, then newest first.
func (s *Store) ListTemplates(ctx context.Context) ([]store.Template, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+templateColumns+` FROM templates ORDER BY name, built_at DESC`)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	defer rows.Close()
	var out []store.Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("list templates: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return out, nil
}

// DeleteTemplate removes the template record with this ID or returns
// store.ErrNotFound.
func (s *Store) DeleteTemplate(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM templates WHERE id = $1`, id)
	return expectOne(tag, err, "delete template "+id)
}

func scanTemplate(row pgx.Row) (store.Template, error) {
	var t store.Template
	var built time.Time
	if err := row.Scan(&t.ID, &t.Name, &t.Aliases, &t.Digest, &t.RootfsDir, &built, &t.SizeBytes); err != nil {
		return store.Template{}, err
	}
	t.BuiltAt = built.UTC()
	if t.Aliases == nil {
		t.Aliases = []string{}
	}
	return t, nil
}

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
