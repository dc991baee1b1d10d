package store

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// secretRec is a running sandbox record whose token, traffic token and env var
// value are distinctive byte strings.
func secretRec(id, secret string) Sandbox {
	r := rec(id, time.Now(), nil)
	r.AccessToken, r.TrafficToken = secret+"-access", secret+"-traffic"
	r.EnvVars = map[string]string{"OPENAI_API_KEY": secret + "-env"}
	return r
}

// fileHolds reports whether any of the database files contains needle.
func fileHolds(t *testing.T, path string, needle string) string {
	t.Helper()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		data, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(needle)) {
			return filepath.Base(p)
		}
	}
	return ""
}

func TestMarkKilledDropsSecrets(t *testing.T) {
	s, path := openTest(t)
	ctx := context.Background()
	const secret = "s3cr3t-7f1e9a"
	if err := s.InsertSandbox(ctx, secretRec("k1", secret)); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertSandbox(ctx, secretRec("live1", "still-running-2b4d")); err != nil {
		t.Fatal(err)
	}
	if err := s.TruncateWAL(ctx); err != nil { // the secret is now in the database file proper
		t.Fatal(err)
	}
	if f := fileHolds(t, path, secret+"-env"); f == "" {
		t.Fatal("test setup: the live secret is not on disk")
	}
	if err := s.MarkKilled(ctx, "k1", time.Now(), "killed by request"); err != nil {
		t.Fatal(err)
	}
	if err := s.TruncateWAL(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if got.AccessToken != "" || got.TrafficToken != "" || len(got.EnvVars) != 0 {
		t.Fatalf("killed record keeps secrets: %+v", got)
	}
	for _, suffix := range []string{"-access", "-traffic", "-env"} {
		if f := fileHolds(t, path, secret+suffix); f != "" {
			t.Errorf("%s still holds %s", f, secret+suffix)
		}
	}
	if live, _ := s.GetSandbox(ctx, "live1"); live.AccessToken == "" || live.EnvVars["OPENAI_API_KEY"] == "" {
		t.Fatalf("a running sandbox lost its secrets: %+v", live)
	}
}

// TestScrubMigration opens a database at schema version 2 holding a killed
// sandbox's secrets (as every release before the scrub kept them).
func TestScrubMigration(t *testing.T) {
	const secret = "old-s3cr3t-c0ffee"
	path := oldDatabase(t, 2,
		fmt.Sprintf(`INSERT INTO sandboxes (id, template_id, cpu_count, memory_mb, disk_mb, started_at, end_at, state,
			access_token, traffic_token, env_vars) VALUES ('dead1', 't', 1, 1, 1, 0, 0, 'killed', '%[1]s-access', '%[1]s-traffic',
			'{"K":"%[1]s-env"}'), ('live1', 't', 1, 1, 1, 0, 0, 'running', 'live-access', '', '{"K":"live-env"}')`, secret),
		"PRAGMA wal_checkpoint(TRUNCATE)")
	if f := fileHolds(t, path, secret+"-env"); f == "" {
		t.Fatal("test setup: the old secret is not on disk")
	}
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dead, err := s.GetSandbox(context.Background(), "dead1")
	if err != nil || dead.AccessToken != "" || dead.TrafficToken != "" || len(dead.EnvVars) != 0 || dead.Team != DefaultTeam {
		t.Fatalf("killed record after migration = %+v, %v", dead, err)
	}
	if live, _ := s.GetSandbox(context.Background(), "live1"); live.AccessToken != "live-access" || live.EnvVars["K"] != "live-env" {
		t.Fatalf("running record after migration = %+v", live)
	}
	for _, suffix := range []string{"-access", "-traffic", "-env"} {
		if f := fileHolds(t, path, secret+suffix); f != "" {
			t.Errorf("%s still holds %s", f, secret+suffix)
		}
	}
}

func TestOpenRestrictsFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cubby.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	checkModes := func(when string) {
		t.Helper()
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s is %v, want 0600", when, filepath.Base(p), st.Mode().Perm())
			}
		}
	}
	checkModes("created")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.WriteFile(p, nil, 0o644); err == nil {
			_ = os.Chmod(p, 0o644) // an older release left them world-readable
		}
	}
	s, err = Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkModes("reopened")
}

// oldDatabase creates a database at schema version (the first version
// migrations applied), runs queries on it and returns its path, closed.
func oldDatabase(t *testing.T, version int, queries ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cubby.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i, m := range migrations()[:version] {
		if _, err := db.Exec(m); err != nil {
			t.Fatalf("migration %d: %v", i+1, err)
		}
	}
	for _, q := range append([]string{fmt.Sprintf("PRAGMA user_version = %d", version)}, queries...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}
