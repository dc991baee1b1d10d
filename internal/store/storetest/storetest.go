// Package storetest is the conformance suite of Cubby's record stores: every
// implementation of the store contract (the SQLite store in package store, the
// PostgreSQL store in store/postgres) runs Run against a fresh, empty store and
// must pass the same tests: record round trips, state transitions and their
// races, listing and cursors, API keys, teams (tenancy), and the
// secrets a killed sandbox must lose, team secrets and network credentials,
// snapshots, volumes and template builds.
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/controlplane"
	"github.com/cubby-dev/cubby/internal/store"
)

// Store is the store contract the suite checks: what the control plane keeps
// (controlplane.Store), the teams and template builds the server
// and builds.Service keep, and Ping. Errors wrap store.ErrNotFound and
// store.ErrConflict as documented on package store's methods.
type Store interface {
	controlplane.Store
	ListTeams(ctx context.Context) ([]store.Team, error)

	InsertTemplateBuild(ctx context.Context, b store.TemplateBuild) error
	GetTemplateBuild(ctx context.Context, id string) (store.TemplateBuild, error)
	StartTemplateBuild(ctx context.Context, id string) (ok bool, err error)
	SetTemplateBuildStatus(ctx context.Context, id string, st store.BuildStatus, reason, step string) error
	FailUnfinishedTemplateBuilds(ctx context.Context, reason string) (int, error)

	Ping(ctx context.Context) error
}

// Opener returns a fresh, empty, migrated store for one test; the suite does
// not close it (the opener registers its own cleanup).
type Opener func(t *testing.T) Store

// tests are the conformance tests by name.
var tests = []struct {
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
	{"KilledDropsSecrets", testKilledDropsSecrets},
	{"SecretRecords", testSecretRecords},
	{"SetNetworkAndKillDropsCredentials", testSetNetwork},
	{"Snapshots", testSnapshots},
	{"SnapshotListing", testSnapshotListing},
	{"Volumes", testVolumes},
	{"SandboxVolumeMounts", testSandboxVolumeMounts},
	{"TemplateBuilds", testTemplateBuilds},
	{"TemplateBuildStatus", testTemplateBuildStatus},
	{"Idempotency", testIdempotency},
}

// Run runs every conformance test as a subtest of t, each on its own store.
func Run(t *testing.T, open Opener) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// RunOne runs the conformance test called name (as Run names its subtests)
// directly in t on a store from open; t fails when no test has that name.
// Stores use it to check their files after a test that drops secrets.
func RunOne(t *testing.T, name string, open Opener) {
	for _, tc := range tests {
		if tc.name == name {
			tc.fn(t, open(t))
			return
		}
	}
	t.Fatalf("no conformance test %q", name)
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
