package controlplane

import (
	"context"
	"net/netip"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

// Store is what the control plane keeps in its record store: sandbox records,
// API keys and teams. *store.Store (SQLite, one server) and *postgres.Store
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
}

// TemplateFinder looks templates up by ID, name or alias (store.Store.FindTemplate).
type TemplateFinder interface {
	FindTemplate(ctx context.Context, ref string) (store.Template, error)
}
