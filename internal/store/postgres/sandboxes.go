package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cubby-dev/cubby/internal/store"
)

var pgxNoRows = pgx.ErrNoRows

const sandboxColumns = `id, team, template_id, template_alias, metadata, env_vars, cpu_count, memory_mb,
	disk_mb, started_at, end_at, state, secure, access_token, traffic_token,
	allow_internet_access, network, lifecycle, runtime, addr, killed_at, kill_reason, private_traffic,
	volume_mounts`

// InsertSandbox adds a new sandbox record (store.Store.InsertSandbox). A
// duplicate ID is an error.
func (s *Store) InsertSandbox(ctx context.Context, sb store.Sandbox) error {
	args, err := sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	q := `INSERT INTO sandboxes (` + sandboxColumns + `) VALUES (` + params(1, len(args)) + `)`
	if _, err := s.pool.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	return nil
}

func sandboxArgs(sb store.Sandbox) ([]any, error) {
	life, err := json.Marshal(sb.Lifecycle)
	if err != nil {
		return nil, fmt.Errorf("encode lifecycle: %w", err)
	}
	var network *string
	if len(sb.Network) > 0 {
		n := string(sb.Network)
		network = &n
	}
	team := sb.Team
	if team == "" {
		team = store.DefaultTeam
	}
	addr := ""
	if sb.Addr.IsValid() {
		addr = sb.Addr.String()
	}
	return []any{sb.ID, team, sb.TemplateID, sb.TemplateAlias, nonNil(sb.Metadata), nonNil(sb.EnvVars),
		sb.CPUCount, sb.MemoryMB, sb.DiskSizeMB, ms(sb.StartedAt), ms(sb.EndAt), string(sb.State), sb.Secure,
		sb.AccessToken, sb.TrafficToken, sb.AllowInternetAccess, network, string(life), sb.Runtime, addr,
		nullTime(sb.KilledAt), sb.KillReason, sb.PrivateTraffic, nonNilMounts(sb.VolumeMounts)}, nil
}

// nonNilMounts returns m, or an empty slice for nil (stored as []).
func nonNilMounts(m []store.VolumeMount) []store.VolumeMount {
	if m == nil {
		return []store.VolumeMount{}
	}
	return m
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// params returns "$from, …, $(from+n-1)".
func params(from, n int) string {
	p := make([]string, n)
	for i := range p {
		p[i] = "$" + strconv.Itoa(from+i)
	}
	return strings.Join(p, ", ")
}

func scanSandbox(row pgx.Row) (store.Sandbox, error) {
	var (
		sb             store.Sandbox
		state, adr     string
		life           []byte
		network        *string
		killed         *time.Time
		started, endAt time.Time
	)
	err := row.Scan(&sb.ID, &sb.Team, &sb.TemplateID, &sb.TemplateAlias, &sb.Metadata, &sb.EnvVars, &sb.CPUCount,
		&sb.MemoryMB, &sb.DiskSizeMB, &started, &endAt, &state, &sb.Secure, &sb.AccessToken, &sb.TrafficToken,
		&sb.AllowInternetAccess, &network, &life, &sb.Runtime, &adr, &killed, &sb.KillReason, &sb.PrivateTraffic,
		&sb.VolumeMounts)
	if err != nil {
		return store.Sandbox{}, err
	}
	sb.StartedAt, sb.EndAt, sb.State, sb.KilledAt = started.UTC(), endAt.UTC(), store.State(state), fromNull(killed)
	sb.Metadata, sb.EnvVars = nonNil(sb.Metadata), nonNil(sb.EnvVars)
	if len(sb.VolumeMounts) == 0 {
		sb.VolumeMounts = nil
	}
	if network != nil {
		sb.Network = json.RawMessage(*network)
	}
	if err := json.Unmarshal(life, &sb.Lifecycle); err != nil {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: decode lifecycle: %w", sb.ID, err)
	}
	if adr != "" {
		a, err := netip.ParseAddr(adr)
		if err != nil {
			return store.Sandbox{}, fmt.Errorf("sandbox %s: parse addr %q: %w", sb.ID, adr, err)
		}
		sb.Addr = a
	}
	return sb, nil
}

// GetSandbox returns the record for id (in any state) or store.ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := scanSandbox(s.pool.QueryRow(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = $1`, id))
	if errNotFound(err) {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// ListSandboxes returns the records matching f ordered by (started_at, id),
// ascending or descending (store.Store.ListSandboxes).
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error) {
	q, args := listQuery(f)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var out []store.Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// listQuery builds the query of f; the metadata filter is jsonb containment
// (every pair present and equal) and the limit applies after it.
func listQuery(f store.SandboxFilter) (string, []any) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if f.Team != "" {
		where = append(where, "team = "+arg(f.Team))
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+arg(states)+")")
	}
	if len(f.Templates) > 0 {
		p := arg(f.Templates)
		where = append(where, "(template_id = ANY("+p+") OR template_alias = ANY("+p+"))")
	}
	if !f.StartedAfter.IsZero() {
		where = append(where, "started_at >= "+arg(ms(f.StartedAfter)))
	}
	if len(f.Metadata) > 0 {
		where = append(where, "metadata @> "+arg(f.Metadata))
	}
	cmp, dir := ">", "ASC"
	if f.Descending {
		cmp, dir = "<", "DESC"
	}
	if f.After != nil {
		at, id := arg(ms(f.After.StartedAt)), arg(f.After.ID)
		where = append(where, "(started_at "+cmp+" "+at+" OR (started_at = "+at+" AND id "+cmp+" "+id+"))")
	}
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY started_at " + dir + ", id " + dir
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	return q, args
}

// MarkStarted records the backend's view of a freshly created running sandbox
// (store.Store.MarkStarted). ErrNotFound unless it exists and is running.
func (s *Store) MarkStarted(ctx context.Context, id string, addr netip.Addr, runtime string, startedAt, endAt time.Time) error {
	return s.transition(ctx, id, []store.State{store.StateRunning},
		"addr = $3, runtime = $4, started_at = $5, end_at = $6", addrString(addr), runtime, ms(startedAt), ms(endAt))
}

// SetAddr updates the address and runtime of a live sandbox.
func (s *Store) SetAddr(ctx context.Context, id string, addr netip.Addr, runtime string) error {
	return s.transition(ctx, id, []store.State{store.StateRunning, store.StatePaused},
		"addr = $3, runtime = $4", addrString(addr), runtime)
}

// SetEndAt replaces the deadline of a live sandbox.
func (s *Store) SetEndAt(ctx context.Context, id string, endAt time.Time) error {
	return s.transition(ctx, id, []store.State{store.StateRunning, store.StatePaused}, "end_at = $3", ms(endAt))
}

// MarkPaused moves a running sandbox to paused: ErrConflict when paused,
// ErrNotFound when unknown or killed.
func (s *Store) MarkPaused(ctx context.Context, id string) error {
	return s.transition(ctx, id, []store.State{store.StateRunning}, "state = 'paused'")
}

// MarkResumed moves a paused sandbox to running with a new deadline and
// address: ErrConflict when running, ErrNotFound when unknown or killed.
func (s *Store) MarkResumed(ctx context.Context, id string, addr netip.Addr, endAt time.Time) error {
	return s.transition(ctx, id, []store.State{store.StatePaused}, "state = 'running', addr = $3, end_at = $4",
		addrString(addr), ms(endAt))
}

// killSet is the update that kills a record and drops its secrets.
const killSet = "state = 'killed', killed_at = $3, kill_reason = $4, access_token = '', traffic_token = '', env_vars = '{}', network_secret = NULL"

// MarkKilled moves a live sandbox to killed with the time and reason and drops
// its access token, traffic token, env vars and sealed network credentials. ErrNotFound when unknown or
// already killed (of racing kills exactly one succeeds).
func (s *Store) MarkKilled(ctx context.Context, id string, at time.Time, reason string) error {
	return s.transition(ctx, id, []store.State{store.StateRunning, store.StatePaused}, killSet, ms(at), reason)
}

// MarkExpired kills a running sandbox whose deadline is at or before at, as
// MarkKilled does, atomically with SetEndAt. ErrConflict when paused or its
// deadline is later, ErrNotFound when unknown or killed.
func (s *Store) MarkExpired(ctx context.Context, id string, at time.Time, reason string) error {
	tag, err := s.pool.Exec(ctx, "UPDATE sandboxes SET "+killSet+
		" WHERE id = $1 AND state = 'running' AND end_at <= $2", id, ms(at), ms(at), reason)
	if err != nil {
		return fmt.Errorf("expire sandbox %s: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	sb, err := s.GetSandbox(ctx, id)
	switch {
	case err != nil:
		return err
	case sb.State == store.StateKilled:
		return fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
	}
	return fmt.Errorf("sandbox %s is %s until %s: %w", id, sb.State, sb.EndAt.Format(time.RFC3339Nano), store.ErrConflict)
}

// transition applies set (whose parameters start at $3) when the record's
// state is one of from; otherwise ErrNotFound (missing or killed) or
// ErrConflict (another state).
func (s *Store) transition(ctx context.Context, id string, from []store.State, set string, args ...any) error {
	states := make([]string, len(from))
	for i, st := range from {
		states[i] = string(st)
	}
	tag, err := s.pool.Exec(ctx, "UPDATE sandboxes SET "+set+" WHERE id = $1 AND state = ANY($2)",
		append([]any{id, states}, args...)...)
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", id, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var state string
	err = s.pool.QueryRow(ctx, "SELECT state FROM sandboxes WHERE id = $1", id).Scan(&state)
	switch {
	case errNotFound(err), err == nil && store.State(state) == store.StateKilled:
		return fmt.Errorf("sandbox %s: %w", id, store.ErrNotFound)
	case err != nil:
		return fmt.Errorf("update sandbox %s: %w", id, err)
	}
	return fmt.Errorf("sandbox %s is %s: %w", id, state, store.ErrConflict)
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}
