package store

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

func openTest(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cubby.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, path
}

func rec(id string, started time.Time, meta map[string]string) Sandbox {
	return Sandbox{
		ID: id, Team: DefaultTeam, TemplateID: "tpl1", TemplateAlias: "base", Metadata: meta,
		EnvVars: map[string]string{"A": "1"}, CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024,
		StartedAt: started, EndAt: started.Add(time.Minute), State: StateRunning, Secure: true,
		AccessToken: "tok", Lifecycle: Lifecycle{OnTimeout: "kill"},
	}
}

func TestOpenMigratesAndReopens(t *testing.T) {
	s, path := openTest(t)
	var mode string
	if err := s.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v; want wal", mode, err)
	}
	var version int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&version); err != nil || version != len(migrations()) {
		t.Fatalf("user_version = %d, %v; want %d", version, err, len(migrations()))
	}
	if err := s.InsertSandbox(context.Background(), rec("a1", time.Now(), nil)); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer func() { _ = s2.Close() }()
	if _, err := s2.GetSandbox(context.Background(), "a1"); err != nil {
		t.Fatalf("record lost on reopen: %v", err)
	}
}

// TestPrivateTrafficMigration opens a database at schema version 3, where a
// traffic token meant allowPublicTraffic=false, and finds that recorded apart.
func TestPrivateTrafficMigration(t *testing.T) {
	path := oldDatabase(t, 3, `INSERT INTO sandboxes (id, template_id, cpu_count, memory_mb, disk_mb, started_at, end_at, state,
		access_token, traffic_token) VALUES ('private1', 't', 1, 1, 1, 0, 0, 'running', 'a1', 't1'), ('public1', 't', 1, 1, 1, 0, 0, 'running', 'a2', '')`)
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id, want := range map[string]bool{"private1": true, "public1": false} {
		if got, err := s.GetSandbox(context.Background(), id); err != nil || got.PrivateTraffic != want {
			t.Errorf("%s after migration: PrivateTraffic %v, %v; want %v", id, got.PrivateTraffic, err, want)
		}
	}
}
