package controlplane

import (
	"context"
	"encoding/json"
	"net/netip"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

// Store is what the control plane keeps in its record store: sandbox records,
// API keys, teams, team secrets, network credentials, snapshots, volumes,
// template builds and Idempotency-Keys. *store.Store (SQLite, one server) and *postgres.Store
// (PostgreSQL, shared by replicas) implement it; errors wrap store.ErrNotFound
// and store.ErrConflict as package store documents.
type Store interface {
	InsertSandbox(ctx context.Context, sb store.Sandbox) error
	GetSandbox(ctx context.Context, id string) (store.Sandbox, error)
	ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error)
	MarkStarted(ctx context.Context, id string, addr netip.Addr, runtime string, startedAt, endAt time.Time) error
	SetAddr(ctx context.Context, id string, addr netip.Addr, runtime string) error
	SetEndAt(ctx context.Context, id string, endAt time.Time) error
	MarkPaused(ctx context.Context, id string) error
	MarkResumed(ctx context.Context, id string, addr netip.Addr, endAt time.Time) error
	MarkKilled(ctx context.Context, id string, at time.Time, reason string) error
	MarkExpired(ctx context.Context, id string, at time.Time, reason string) error
	// TruncateWAL drops what killed records left behind in the store's files.
	TruncateWAL(ctx context.Context) error

	InsertAPIKey(ctx context.Context, k store.APIKey) error
	ListAPIKeys(ctx context.Context) ([]store.APIKey, error)
	ActiveAPIKeys(ctx context.Context) ([]store.APIKey, error)
	RevokeAPIKey(ctx context.Context, id string, at time.Time) error
	TouchAPIKey(ctx context.Context, id string, at time.Time) error

	InsertSecret(ctx context.Context, sec store.Secret) error
	GetSecret(ctx context.Context, team, idOrName string) (store.Secret, error)
	ListSecrets(ctx context.Context, team, after string, limit int) ([]store.Secret, error)
	UpdateSecret(ctx context.Context, team, id string, sealed []byte, metadata map[string]string, at time.Time) (store.Secret, error)
	DeleteSecret(ctx context.Context, team, id string) error
	// SetNetwork and NetworkSecret keep a sandbox's egress settings and its
	// sealed network credentials.
	SetNetwork(ctx context.Context, id string, allowInternet *bool, network json.RawMessage, sealed []byte) error
	NetworkSecret(ctx context.Context, id string) ([]byte, error)

	PutSnapshot(ctx context.Context, sn store.Snapshot) (replaced string, err error)
	FindSnapshot(ctx context.Context, team, ref string) (store.Snapshot, error)
	ListSnapshots(ctx context.Context, f store.SnapshotFilter) ([]store.Snapshot, error)
	SnapshotIDs(ctx context.Context) ([]string, error)
	TemplateSnapshots(ctx context.Context, templateID string) (int, error)
	DeleteSnapshot(ctx context.Context, team, id string) error

	InsertVolume(ctx context.Context, v store.Volume) error
	GetVolume(ctx context.Context, id string) (store.Volume, error)
	FindVolume(ctx context.Context, team, ref string) (store.Volume, error)
	ListVolumes(ctx context.Context, team string) ([]store.Volume, error)
	DeleteVolume(ctx context.Context, team, id string) error

	// The template build API's reads (builds.Service writes builds).
	ListTemplateBuilds(ctx context.Context, templateID string) ([]store.TemplateBuild, error)
	TemplateBuildTeam(ctx context.Context, templateID string) (team string, ok bool, err error)
	TemplateUsage(ctx context.Context, templateID string) (int64, time.Time, error)

	GetIdempotency(ctx context.Context, scope, key string, since time.Time) (store.IdempotencyRecord, error)
	PutIdempotency(ctx context.Context, r store.IdempotencyRecord, expired time.Time) error
}
