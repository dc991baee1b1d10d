// Package storetest is the conformance suite of Cubby's record stores: every
// implementation of the store contract (the SQLite store in package store, the
// PostgreSQL store in store/postgres) runs Run against a fresh, empty store and
// must pass the same tests: record round trips, state transitions and their
// races, listing and cursors, API keys, teams (tenancy), templates, and the
// secrets a killed sandbox must lose.
package storetest

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

// Store is the store contract the suite checks. Errors wrap store.ErrNotFound
// and store.ErrConflict as documented on package store's methods.
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
	TruncateWAL(ctx context.Context) error

	InsertAPIKey(ctx context.Context, k store.APIKey) error
	ListAPIKeys(ctx context.Context) ([]store.APIKey, error)
	ActiveAPIKeys(ctx context.Context) ([]store.APIKey, error)
	RevokeAPIKey(ctx context.Context, id string, at time.Time) error
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
	ListTeams(ctx context.Context) ([]store.Team, error)

	PutTemplate(ctx context.Context, t store.Template) error
	GetTemplate(ctx context.Context, id string) (store.Template, error)
	FindTemplate(ctx context.Context, ref string) (store.Template, error)
	ListTemplates(ctx context.Context) ([]store.Template, error)
	DeleteTemplate(ctx context.Context, id string) error

	Ping(ctx context.Context) error
}

// Opener returns a fresh, empty, migrated store for one test; the suite does
// not close it (the opener registers its own cleanup).
type Opener func(t *testing.T) Store

// Run runs every conformance test as a subtest of t, each on its own store.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, Store)
	}{
		{"SandboxRoundTrip", testSandboxRoundTrip},
		{"Transitions", testTransitions},
		{"Expiry", testExpiry},
		{"RacingKills", testRacingKills},
		{"RacingExpiryAndExtension", testRacingExpiry},
		{"ListFiltersAndCursor", testListFiltersAndCursor},
		{"APIKeys", testAPIKeys},
		{"Teams", testTeams},
		{"Templates", testTemplates},
		{"KilledDropsSecrets", testKilledDropsSecrets},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// Rec is a running sandbox record of the default team started at started.
func Rec(id string, started time.Time, meta map[string]string) store.Sandbox {
	return store.Sandbox{
		ID: id, Team: store.DefaultTeam, TemplateID: "tpl1", TemplateAlias: "base", Metadata: meta,
		EnvVars: map[string]string{"A": "1"}, CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024,
		StartedAt: started, EndAt: started.Add(time.Minute), State: store.StateRunning, Secure: true,
		AccessToken: "tok", Lifecycle: store.Lifecycle{OnTimeout: "kill"},
	}
}

// SecretRec is a running sandbox record whose access token, traffic token and
// env var value are secret with the suffixes "-access", "-traffic" and "-env".
func SecretRec(id, secret string) store.Sandbox {
	r := Rec(id, time.Now(), nil)
	r.AccessToken, r.TrafficToken = secret+"-access", secret+"-traffic"
	r.EnvVars = map[string]string{"OPENAI_API_KEY": secret + "-env"}
	return r
}

func insert(t *testing.T, s Store, recs ...store.Sandbox) {
	t.Helper()
	for _, r := range recs {
		if err := s.InsertSandbox(context.Background(), r); err != nil {
			t.Fatalf("insert %s: %v", r.ID, err)
		}
	}
}
