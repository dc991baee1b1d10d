package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// BuildStatus is the status of a template build (E2B TemplateBuildStatus).
type BuildStatus string

// Build statuses.
const (
	BuildWaiting  BuildStatus = "waiting"  // requested, or queued behind other builds
	BuildBuilding BuildStatus = "building" // steps are running
	BuildReady    BuildStatus = "ready"    // published under its tags
	BuildError    BuildStatus = "error"    // failed; Reason says why
)

// TemplateBuild is one build requested through the template build API.
type TemplateBuild struct {
	ID         string // UUID
	TemplateID string
	Team       string   // the team that requested it (and owns the template)
	Name       string   // the template's name
	Tags       []string // tags the build gets once ready; never nil when read back
	Status     BuildStatus
	Started    bool   // its steps were posted (a build starts once)
	Reason     string // failure message (status error)
	ReasonStep string // failed step: "base", "1".."n", "finalize" or ""
	CPUCount   int
	MemoryMB   int
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time // zero until ready or error
}

const buildColumns = `id, template_id, team, name, tags, status, started, reason, reason_step, cpu_count, memory_mb, created_at, updated_at, finished_at`

// InsertTemplateBuild records a new build.
func (s *Store) InsertTemplateBuild(ctx context.Context, b TemplateBuild) error {
	if b.Tags == nil {
		b.Tags = []string{}
	}
	tags, err := json.Marshal(b.Tags)
	if err != nil {
		return fmt.Errorf("insert template build %s: %w", b.ID, err)
	}
	_, err = s.db.ExecContext(ctx, `INSERT INTO template_builds (`+buildColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
		b.ID, b.TemplateID, b.Team, b.Name, string(tags), string(b.Status), b.Started, b.Reason, b.ReasonStep,
		b.CPUCount, b.MemoryMB, toMS(b.CreatedAt), toMS(b.UpdatedAt), nullMS(b.FinishedAt))
	if err != nil {
		return fmt.Errorf("insert template build %s: %w", b.ID, err)
	}
	return nil
}

// GetTemplateBuild returns build id or ErrNotFound.
func (s *Store) GetTemplateBuild(ctx context.Context, id string) (TemplateBuild, error) {
	b, err := scanBuild(s.db.QueryRowContext(ctx, `SELECT `+buildColumns+` FROM template_builds WHERE id = ?`, id))
	if err != nil {
		return TemplateBuild{}, errNoRows(err, "template build "+id)
	}
	return b, nil
}

// ListTemplateBuilds returns the builds of templateID, newest first.
func (s *Store) ListTemplateBuilds(ctx context.Context, templateID string) ([]TemplateBuild, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+buildColumns+` FROM template_builds WHERE template_id = ? ORDER BY created_at DESC, id`, templateID)
	if err != nil {
		return nil, fmt.Errorf("list template builds: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []TemplateBuild
	for rows.Next() {
		b, err := scanBuild(rows)
		if err != nil {
			return nil, fmt.Errorf("list template builds: %w", err)
		}
		out = append(out, b)
	}
	return out, rows.Err()
}

// StartTemplateBuild marks build id started; ok is false when it already was.
func (s *Store) StartTemplateBuild(ctx context.Context, id string) (ok bool, err error) {
	res, err := s.db.ExecContext(ctx, `UPDATE template_builds SET started = 1, updated_at = ? WHERE id = ? AND started = 0`, toMS(time.Now()), id)
	if err != nil {
		return false, fmt.Errorf("start template build %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// SetTemplateBuildStatus records a build's status; ready and error also set
// its finish time, error its reason and failed step.
func (s *Store) SetTemplateBuildStatus(ctx context.Context, id string, st BuildStatus, reason, step string) error {
	now := time.Now()
	var finished sql.NullInt64
	if st == BuildReady || st == BuildError {
		finished = nullMS(now)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE template_builds SET status = ?, reason = ?, reason_step = ?, updated_at = ?, finished_at = ? WHERE id = ?`,
		string(st), reason, step, toMS(now), finished, id)
	if err != nil {
		return fmt.Errorf("set template build %s status: %w", id, err)
	}
	return expectOne(res, "template build "+id)
}

// FailUnfinishedTemplateBuilds marks every waiting or building build failed
// with reason (a server restart) and returns how many there were.
func (s *Store) FailUnfinishedTemplateBuilds(ctx context.Context, reason string) (int, error) {
	now := toMS(time.Now())
	res, err := s.db.ExecContext(ctx, `UPDATE template_builds SET status = 'error', reason = ?, updated_at = ?, finished_at = ?
		WHERE status IN ('waiting', 'building')`, reason, now, now)
	if err != nil {
		return 0, fmt.Errorf("fail unfinished template builds: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// TemplateBuildTeam returns the team of the first build requested for
// templateID; ok is false when none was.
func (s *Store) TemplateBuildTeam(ctx context.Context, templateID string) (team string, ok bool, err error) {
	err = s.db.QueryRowContext(ctx, `SELECT team FROM template_builds WHERE template_id = ? ORDER BY created_at LIMIT 1`, templateID).Scan(&team)
	if errors.Is(err, sql.ErrNoRows) {
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
	var last sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT COUNT(*), MAX(started_at) FROM sandboxes WHERE template_id = ?`, templateID).Scan(&n, &last)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("template usage %s: %w", templateID, err)
	}
	return n, fromNullMS(last), nil
}

func scanBuild(row rowScanner) (TemplateBuild, error) {
	var b TemplateBuild
	var tags, status string
	var created, updated int64
	var finished sql.NullInt64
	if err := row.Scan(&b.ID, &b.TemplateID, &b.Team, &b.Name, &tags, &status, &b.Started, &b.Reason, &b.ReasonStep,
		&b.CPUCount, &b.MemoryMB, &created, &updated, &finished); err != nil {
		return TemplateBuild{}, err
	}
	b.Status, b.CreatedAt, b.UpdatedAt, b.FinishedAt = BuildStatus(status), fromMS(created), fromMS(updated), fromNullMS(finished)
	if err := json.Unmarshal([]byte(tags), &b.Tags); err != nil {
		return TemplateBuild{}, fmt.Errorf("template build %s: decode tags: %w", b.ID, err)
	}
	if b.Tags == nil {
		b.Tags = []string{}
	}
	return b, nil
}
