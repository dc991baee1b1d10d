package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cubby-dev/cubby/internal/store"
)

const buildColumns = `id, template_id, team, name, tags, status, started, reason, reason_step, cpu_count, memory_mb,
	created_at, updated_at, finished_at`

// InsertTemplateBuild records a new build (store.Store.InsertTemplateBuild).
func (s *Store) InsertTemplateBuild(ctx context.Context, b store.TemplateBuild) error {
	if b.Tags == nil {
		b.Tags = []string{}
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO template_builds (`+buildColumns+`) VALUES (`+params(1, 14)+`)`,
		b.ID, b.TemplateID, b.Team, b.Name, b.Tags, string(b.Status), b.Started, b.Reason, b.ReasonStep,
		b.CPUCount, b.MemoryMB, ms(b.CreatedAt), ms(b.UpdatedAt), nullTime(b.FinishedAt))
	if err != nil {
		return fmt.Errorf("insert template build %s: %w", b.ID, err)
	}
	return nil
}

// GetTemplateBuild returns build id or store.ErrNotFound.
func (s *Store) GetTemplateBuild(ctx context.Context, id string) (store.TemplateBuild, error) {
	b, err := scanBuild(s.pool.QueryRow(ctx, `SELECT `+buildColumns+` FROM template_builds WHERE id = $1`, id))
	return b, notFound(err, "template build "+id)
}

// ListTemplateBuilds returns the builds of templateID, newest first.
func (s *Store) ListTemplateBuilds(ctx context.Context, templateID string) ([]store.TemplateBuild, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+buildColumns+` FROM template_builds WHERE template_id = $1
		ORDER BY created_at DESC, id COLLATE "C"`, templateID)
	if err != nil {
		return nil, fmt.Errorf("list template builds: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.TemplateBuild, error) { return scanBuild(r) })
	if err != nil {
		return nil, fmt.Errorf("list template builds: %w", err)
	}
	return out, nil
}

// StartTemplateBuild marks build id started; ok is false when it already was
// (or there is no such build).
func (s *Store) StartTemplateBuild(ctx context.Context, id string) (ok bool, err error) {
	tag, err := s.pool.Exec(ctx, `UPDATE template_builds SET started = true, updated_at = $1 WHERE id = $2 AND NOT started`,
		ms(time.Now()), id)
	if err != nil {
		return false, fmt.Errorf("start template build %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SetTemplateBuildStatus records a build's status; ready and error also set
// its finish time, error its reason and failed step. store.ErrNotFound for
// an unknown build.
func (s *Store) SetTemplateBuildStatus(ctx context.Context, id string, st store.BuildStatus, reason, step string) error {
	now := time.Now()
	var finished *time.Time
	if st == store.BuildReady || st == store.BuildError {
		finished = nullTime(now)
	}
	tag, err := s.pool.Exec(ctx, `UPDATE template_builds SET status = $1, reason = $2, reason_step = $3, updated_at = $4,
		finished_at = $5 WHERE id = $6`, string(st), reason, step, ms(now), finished, id)
	return expectOne(tag, err, "set template build "+id+" status")
}

// FailUnfinishedTemplateBuilds marks every waiting or building build failed
// with reason (a server restart) and returns how many there were.
func (s *Store) FailUnfinishedTemplateBuilds(ctx context.Context, reason string) (int, error) {
	now := ms(time.Now())
	tag, err := s.pool.Exec(ctx, `UPDATE template_builds SET status = 'error', reason = $1, updated_at = $2, finished_at = $2
		WHERE status IN ('waiting', 'building')`, reason, now)
	if err != nil {
		return 0, fmt.Errorf("fail unfinished template builds: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// TemplateBuildTeam returns the team of the first build requested for
// templateID; ok is false when none was.
func (s *Store) TemplateBuildTeam(ctx context.Context, templateID string) (team string, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `SELECT team FROM template_builds WHERE template_id = $1 ORDER BY created_at LIMIT 1`,
		templateID).Scan(&team)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("template build team %s: %w", templateID, err)
	}
	return team, true, nil
}

// TemplateUsage returns how many sandboxes were created from templateID and
// when the last one started (zero when none).
func (s *Store) TemplateUsage(ctx context.Context, templateID string) (int64, time.Time, error) {
	var n int64
	var last *time.Time
	err := s.pool.QueryRow(ctx, `SELECT COUNT(*), MAX(started_at) FROM sandboxes WHERE template_id = $1`, templateID).Scan(&n, &last)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("template usage %s: %w", templateID, err)
	}
	return n, fromNull(last), nil
}

func scanBuild(row pgx.Row) (store.TemplateBuild, error) {
	var b store.TemplateBuild
	var status string
	var finished *time.Time
	if err := row.Scan(&b.ID, &b.TemplateID, &b.Team, &b.Name, &b.Tags, &status, &b.Started, &b.Reason, &b.ReasonStep,
		&b.CPUCount, &b.MemoryMB, &b.CreatedAt, &b.UpdatedAt, &finished); err != nil {
		return store.TemplateBuild{}, err
	}
	b.Status, b.CreatedAt, b.UpdatedAt, b.FinishedAt = store.BuildStatus(status), b.CreatedAt.UTC(), b.UpdatedAt.UTC(), fromNull(finished)
	if b.Tags == nil {
		b.Tags = []string{}
	}
	return b, nil
}
