package store

import (
	"context"
	"fmt"
	"time"
)

// DefaultTeam is the team of CUBBY_API_KEY, of keys created without a team,
// and of every key and sandbox recorded before teams existed (migration 2).
const DefaultTeam = "default"

// Team is a tenant. Every API key belongs to one team, and every sandbox to
// the team of the key that created it; a team sees only its own sandboxes.
type Team struct {
	Name      string
	CreatedAt time.Time
}

// ListTeams returns every team, oldest first.
func (s *Store) ListTeams(ctx context.Context) ([]Team, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT name, created_at FROM teams ORDER BY created_at, name`)
	if err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []Team
	for rows.Next() {
		var t Team
		var created int64
		if err := rows.Scan(&t.Name, &created); err != nil {
			return nil, fmt.Errorf("list teams: %w", err)
		}
		t.CreatedAt = fromMS(created)
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list teams: %w", err)
	}
	return out, nil
}
