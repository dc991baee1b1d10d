package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// State is a sandbox's lifecycle state as recorded in the store.
type State string

// Sandbox states. Killed records are kept (with KilledAt and KillReason).
const (
	StateRunning State = "running"
	StatePaused  State = "paused"
	StateKilled  State = "killed"
)

// Lifecycle is what happens to a sandbox at its deadline (docs/wire/e2b-api.md §2.2
// SandboxDetail.lifecycle, plus the create-time autoPauseMemory flag).
type Lifecycle struct {
	OnTimeout       string `json:"onTimeout"` // "kill" or "pause"
	AutoResume      bool   `json:"autoResume"`
	AutoPauseMemory bool   `json:"autoPauseMemory,omitempty"`
}

// Sandbox is one sandbox record.
type Sandbox struct {
	ID                  string
	Team                string // owner: the team of the API key that created it; "" is stored as DefaultTeam
	TemplateID          string
	TemplateAlias       string
	Metadata            map[string]string // never nil when read back
	EnvVars             map[string]string // never nil when read back; emptied when killed
	CPUCount            int
	MemoryMB            int // MiB
	DiskSizeMB          int // MiB
	StartedAt           time.Time
	EndAt               time.Time // deadline (TTL)
	State               State
	Secure              bool
	AccessToken         string // envd access token; "" when unsecured or killed
	TrafficToken        string // trafficAccessToken; "" when unsecured with public traffic allowed, or killed
	PrivateTraffic      bool   // network.allowPublicTraffic was false: ports but envd's need TrafficToken
	AllowInternetAccess *bool
	Network             json.RawMessage // create-time network config JSON; nil when absent
	Lifecycle           Lifecycle
	Runtime             string
	Addr                netip.Addr // zero until the backend created the sandbox
	KilledAt            time.Time  // zero unless killed
	KillReason          string
	VolumeMounts        []VolumeMount // nil when none
}

// VolumeMount is a volume a sandbox mounts: the volume's name and the path
// inside the sandbox.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

const sandboxColumns = `id, template_id, template_alias, metadata, env_vars, cpu_count, memory_mb,
	disk_mb, started_at, end_at, state, secure, access_token, traffic_token,
	allow_internet_access, network, lifecycle, runtime, addr, killed_at, kill_reason, team, private_traffic,
	volume_mounts`

// InsertSandbox adds a new sandbox record. A duplicate ID is an error.
func (s *Store) InsertSandbox(ctx context.Context, sb Sandbox) error {
	args, err := sandboxArgs(sb)
	if err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	q := `INSERT INTO sandboxes (` + sandboxColumns + `) VALUES (` + placeholders(len(args)) + `)`
	if _, err := s.db.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("insert sandbox %s: %w", sb.ID, err)
	}
	return nil
}

func sandboxArgs(sb Sandbox) ([]any, error) {
	meta, err := json.Marshal(nonNil(sb.Metadata))
	if err != nil {
		return nil, fmt.Errorf("encode metadata: %w", err)
	}
	env, err := json.Marshal(nonNil(sb.EnvVars))
	if err != nil {
		return nil, fmt.Errorf("encode env vars: %w", err)
	}
	life, err := json.Marshal(sb.Lifecycle)
	if err != nil {
		return nil, fmt.Errorf("encode lifecycle: %w", err)
	}
	var network sql.NullString
	if len(sb.Network) > 0 {
		network = sql.NullString{String: string(sb.Network), Valid: true}
	}
	var allow sql.NullBool
	if sb.AllowInternetAccess != nil {
		allow = sql.NullBool{Bool: *sb.AllowInternetAccess, Valid: true}
	}
	team := sb.Team
	if team == "" {
		team = DefaultTeam
	}
	mounts, err := json.Marshal(nonNilSlice(sb.VolumeMounts))
	if err != nil {
		return nil, fmt.Errorf("encode volume mounts: %w", err)
	}
	return []any{sb.ID, sb.TemplateID, sb.TemplateAlias, string(meta), string(env), sb.CPUCount,
		sb.MemoryMB, sb.DiskSizeMB, toMS(sb.StartedAt), toMS(sb.EndAt), string(sb.State), sb.Secure,
		sb.AccessToken, sb.TrafficToken, allow, network, string(life), sb.Runtime, addrString(sb.Addr),
		nullMS(sb.KilledAt), sb.KillReason, team, sb.PrivateTraffic, string(mounts)}, nil
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

type rowScanner interface{ Scan(dest ...any) error }

func scanSandbox(row rowScanner) (Sandbox, error) {
	var (
		sb                          Sandbox
		meta, env, life, state, adr string
		mounts                      string
		started, end                int64
		allow                       sql.NullBool
		network                     sql.NullString
		killed                      sql.NullInt64
	)
	err := row.Scan(&sb.ID, &sb.TemplateID, &sb.TemplateAlias, &meta, &env, &sb.CPUCount, &sb.MemoryMB,
		&sb.DiskSizeMB, &started, &end, &state, &sb.Secure, &sb.AccessToken, &sb.TrafficToken,
		&allow, &network, &life, &sb.Runtime, &adr, &killed, &sb.KillReason, &sb.Team, &sb.PrivateTraffic, &mounts)
	if err != nil {
		return Sandbox{}, err
	}
	sb.StartedAt, sb.EndAt, sb.State, sb.KilledAt = fromMS(started), fromMS(end), State(state), fromNullMS(killed)
	if allow.Valid {
		v := allow.Bool
		sb.AllowInternetAccess = &v
	}
	if network.Valid {
		sb.Network = json.RawMessage(network.String)
	}
	if err := decodeSandboxJSON(&sb, meta, env, life); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	if err := json.Unmarshal([]byte(mounts), &sb.VolumeMounts); err != nil {
		return Sandbox{}, fmt.Errorf("sandbox %s: decode volume mounts: %w", sb.ID, err)
	}
	if len(sb.VolumeMounts) == 0 {
		sb.VolumeMounts = nil
	}
	if adr != "" {
		a, err := netip.ParseAddr(adr)
		if err != nil {
			return Sandbox{}, fmt.Errorf("sandbox %s: parse addr %q: %w", sb.ID, adr, err)
		}
		sb.Addr = a
	}
	return sb, nil
}

func decodeSandboxJSON(sb *Sandbox, meta, env, life string) error {
	if err := json.Unmarshal([]byte(meta), &sb.Metadata); err != nil {
		return fmt.Errorf("decode metadata: %w", err)
	}
	if err := json.Unmarshal([]byte(env), &sb.EnvVars); err != nil {
		return fmt.Errorf("decode env vars: %w", err)
	}
	if err := json.Unmarshal([]byte(life), &sb.Lifecycle); err != nil {
		return fmt.Errorf("decode lifecycle: %w", err)
	}
	sb.Metadata, sb.EnvVars = nonNil(sb.Metadata), nonNil(sb.EnvVars)
	return nil
}

// GetSandbox returns the record for id (in any state) or ErrNotFound.
func (s *Store) GetSandbox(ctx context.Context, id string) (Sandbox, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+sandboxColumns+` FROM sandboxes WHERE id = ?`, id)
	sb, err := scanSandbox(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Sandbox{}, fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// Cursor is a position in a startedAt/ID ordering (exclusive).
type Cursor struct {
	StartedAt time.Time
	ID        string
}

// SandboxFilter selects sandboxes for ListSandboxes. Zero fields do not filter.
type SandboxFilter struct {
	Team         string            // owned by this team
	States       []State           // any of these states; empty = every state
	Templates    []string          // template_id or template_alias equal to any of these
	StartedAfter time.Time         // started_at >= this (ms precision, inclusive)
	Metadata     map[string]string // every pair must be present and equal
	Descending   bool              // newest first; ties broken by ID descending
	After        *Cursor           // only records strictly after this position in the order
	Limit        int               // at most this many records; 0 = no limit
}

// ListSandboxes returns the records matching f, ordered by (started_at, id)
// ascending or descending.
func (s *Store) ListSandboxes(ctx context.Context, f SandboxFilter) ([]Sandbox, error) {
	q, args := f.query()
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer func() { _ = rows.Close() }()
	var out []Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		if !metadataMatches(sb.Metadata, f.Metadata) {
			continue
		}
		out = append(out, sb)
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

func (f SandboxFilter) query() (string, []any) {
	var where []string
	var args []any
	if f.Team != "" {
		where = append(where, "team = ?")
		args = append(args, f.Team)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN ("+placeholders(len(f.States))+")")
		for _, st := range f.States {
			args = append(args, string(st))
		}
	}
	if len(f.Templates) > 0 {
		ph := placeholders(len(f.Templates))
		where = append(where, "(template_id IN ("+ph+") OR template_alias IN ("+ph+"))")
		for range 2 {
			for _, t := range f.Templates {
				args = append(args, t)
			}
		}
	}
	if !f.StartedAfter.IsZero() {
		where = append(where, "started_at >= ?")
		args = append(args, toMS(f.StartedAfter))
	}
	cmp, dir := ">", "ASC"
	if f.Descending {
		cmp, dir = "<", "DESC"
	}
	if f.After != nil {
		ms := toMS(f.After.StartedAt)
		where = append(where, "(started_at "+cmp+" ? OR (started_at = ? AND id "+cmp+" ?))")
		args = append(args, ms, ms, f.After.ID)
	}
	q := `SELECT ` + sandboxColumns + ` FROM sandboxes`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + " ORDER BY started_at " + dir + ", id " + dir, args
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func metadataMatches(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// MarkStarted records the backend's view of a freshly created (or re-adopted)
// running sandbox: its address, runtime, start time and deadline.
// Returns ErrNotFound unless the record exists and is running.
func (s *Store) MarkStarted(ctx context.Context, id string, addr netip.Addr, runtime string, startedAt, endAt time.Time) error {
	return s.transition(ctx, id, []State{StateRunning},
		"addr = ?, runtime = ?, started_at = ?, end_at = ?",
		addrString(addr), runtime, toMS(startedAt), toMS(endAt))
}

// SetAddr updates the address and runtime of a live (running or paused) sandbox.
func (s *Store) SetAddr(ctx context.Context, id string, addr netip.Addr, runtime string) error {
	return s.transition(ctx, id, []State{StateRunning, StatePaused}, "addr = ?, runtime = ?", addrString(addr), runtime)
}

// SetEndAt replaces the deadline of a live (running or paused) sandbox.
func (s *Store) SetEndAt(ctx context.Context, id string, endAt time.Time) error {
	return s.transition(ctx, id, []State{StateRunning, StatePaused}, "end_at = ?", toMS(endAt))
}

// MarkPaused moves a running sandbox to paused. Returns ErrConflict when it is
// already paused and ErrNotFound when it is unknown or killed.
func (s *Store) MarkPaused(ctx context.Context, id string) error {
	return s.transition(ctx, id, []State{StateRunning}, "state = 'paused'")
}

// MarkResumed moves a paused sandbox to running with a new deadline and address.
// Returns ErrConflict when it is already running, ErrNotFound when unknown or killed.
func (s *Store) MarkResumed(ctx context.Context, id string, addr netip.Addr, endAt time.Time) error {
	return s.transition(ctx, id, []State{StatePaused}, "state = 'running', addr = ?, end_at = ?",
		addrString(addr), toMS(endAt))
}

// MarkKilled moves a running or paused sandbox to killed with the time and reason.
// The record is kept without its secrets: access token, traffic token, env
// vars and the sealed network credentials are emptied (their old copies stay
// in the WAL until TruncateWAL).
// Returns ErrNotFound when unknown or already killed.
func (s *Store) MarkKilled(ctx context.Context, id string, at time.Time, reason string) error {
	return s.transition(ctx, id, []State{StateRunning, StatePaused}, killSet, toMS(at), reason)
}

// killSet is the update that kills a record (killed_at and kill_reason are
// its parameters) and drops its secrets.
const killSet = "state = 'killed', killed_at = ?, kill_reason = ?, access_token = '', traffic_token = '', env_vars = '{}', network_secret = NULL"

// MarkExpired moves a running sandbox whose deadline is at or before at to
// killed with the time and reason, dropping its secrets as MarkKilled does. It
// is atomic with SetEndAt: of a deadline extension and an expiry racing on
// several servers, exactly one applies. Returns ErrConflict when the sandbox is
// paused or its deadline is after at, ErrNotFound when unknown or killed.
func (s *Store) MarkExpired(ctx context.Context, id string, at time.Time, reason string) error {
	res, err := s.db.ExecContext(ctx, "UPDATE sandboxes SET "+killSet+" WHERE id = ? AND state = 'running' AND end_at <= ?",
		toMS(at), reason, id, toMS(at))
	if err != nil {
		return fmt.Errorf("expire sandbox %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("expire sandbox %s: %w", id, err)
	} else if n == 1 {
		return nil
	}
	sb, err := s.GetSandbox(ctx, id)
	switch {
	case err != nil:
		return err
	case sb.State == StateKilled:
		return fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	}
	return fmt.Errorf("sandbox %s is %s until %s: %w", id, sb.State, sb.EndAt.Format(time.RFC3339Nano), ErrConflict)
}

// transition applies set to the record when its state is one of from. When no row
// changes it reports ErrNotFound (missing or killed) or ErrConflict (other state).
func (s *Store) transition(ctx context.Context, id string, from []State, set string, args ...any) error {
	q := "UPDATE sandboxes SET " + set + " WHERE id = ? AND state IN (" + placeholders(len(from)) + ")"
	args = append(args, id)
	for _, st := range from {
		args = append(args, string(st))
	}
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("update sandbox %s: %w", id, err)
	} else if n == 1 {
		return nil
	}
	var state string
	err = s.db.QueryRowContext(ctx, "SELECT state FROM sandboxes WHERE id = ?", id).Scan(&state)
	switch {
	case errors.Is(err, sql.ErrNoRows), err == nil && State(state) == StateKilled:
		return fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	case err != nil:
		return fmt.Errorf("update sandbox %s: %w", id, err)
	}
	return fmt.Errorf("sandbox %s is %s: %w", id, state, ErrConflict)
}

// nonNilSlice returns s, or an empty slice for nil.
func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
