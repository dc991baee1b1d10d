package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Template is one built template: an immutable rootfs tree on disk.
type Template struct {
	ID        string
	Name      string
	Aliases   []string // never nil when read back
	Digest    string   // content digest of the built tree (e.g. "sha256:…")
	RootfsDir string   // absolute path of the rootfs tree
	BuiltAt   time.Time
	SizeBytes int64 // bytes on disk
}

const templateColumns = `id, name, aliases, digest, rootfs_dir, built_at, size_bytes`

// PutTemplate inserts or replaces the template with t.ID.
func (s *Store) PutTemplate(ctx context.Context, t Template) error {
	if t.Aliases == nil {
		t.Aliases = []string{}
	}
	aliases, err := json.Marshal(t.Aliases)
	if err != nil {
		return fmt.Errorf("put template %s: encode aliases: %w", t.ID, err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES (?,?,?,?,?,?,?)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, aliases = excluded.aliases,
		digest = excluded.digest, rootfs_dir = excluded.rootfs_dir, built_at = excluded.built_at,
		size_bytes = excluded.size_bytes`,
		t.ID, t.Name, string(aliases), t.Digest, t.RootfsDir, toMS(t.BuiltAt), t.SizeBytes)
	if err != nil {
		return fmt.Errorf("put template %s: %w", t.ID, err)
	}
	return nil
}

// GetTemplate returns the template with this exact ID or ErrNotFound.
func (s *Store) GetTemplate(ctx context.Context, id string) (Template, error) {
	t, err := scanTemplate(s.db.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE id = ?`, id))
	if err != nil {
		return Template{}, errNoRows(err, "template "+id)
	}
	return t, nil
}

// FindTemplate returns the template whose ID, name or one of whose aliases equals
// ref (IDs win over names, names over aliases; the newest build wins a tie), or
// ErrNotFound.
func (s *Store) FindTemplate(ctx context.Context, ref string) (Template, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates
		WHERE id = ?1 OR name = ?1 OR EXISTS (SELECT 1 FROM json_each(templates.aliases) WHERE value = ?1)
		ORDER BY (id = ?1) DESC, (name = ?1) DESC, built_at DESC LIMIT 1`, ref)
	t, err := scanTemplate(row)
	if err != nil {
		return Template{}, errNoRows(err, "template "+ref)
	}
	return t, nil
}

// ListTemplates returns every template ordered by name, then newest first.
func (s *Store) ListTemplates(ctx context.Context) ([]Template, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+templateColumns+` FROM templates ORDER BY name, built_at DESC`)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []Template
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

// DeleteTemplate removes the template record with this ID or returns ErrNotFound.
func (s *Store) DeleteTemplate(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM templates WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete template %s: %w", id, err)
	}
	return expectOne(res, "template "+id)
}

func scanTemplate(row rowScanner) (Template, error) {
	var t Template
	var aliases string
	var built int64
	if err := row.Scan(&t.ID, &t.Name, &aliases, &t.Digest, &t.RootfsDir, &built, &t.SizeBytes); err != nil {
		return Template{}, err
	}
	t.BuiltAt = fromMS(built)
	if err := json.Unmarshal([]byte(aliases), &t.Aliases); err != nil {
		return Template{}, fmt.Errorf("template %s: decode aliases: %w", t.ID, err)
	}
	if t.Aliases == nil {
		t.Aliases = []string{}
	}
	return t, nil
}
