package store

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"reflect"
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

func TestSandboxRoundTrip(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	allow := false
	in := rec("abc", time.UnixMilli(1_700_000_000_123).UTC(), map[string]string{"k y": "v&1"})
	in.AllowInternetAccess = &allow
	in.Network = []byte(`{"allowPublicTraffic":false}`)
	in.TrafficToken, in.PrivateTraffic = "traffic", true
	in.Addr = netip.MustParseAddr("10.77.0.5")
	in.Lifecycle = Lifecycle{OnTimeout: "pause", AutoResume: true}
	if err := s.InsertSandbox(ctx, in); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetSandbox(ctx, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
	}
	if _, err := s.GetSandbox(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
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

func TestTransitions(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	if err := s.InsertSandbox(ctx, rec("s1", time.Now(), nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPaused(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPaused(ctx, "s1"); !errors.Is(err, ErrConflict) {
		t.Fatalf("pause paused: %v, want ErrConflict", err)
	}
	end := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := s.MarkResumed(ctx, "s1", netip.MustParseAddr("10.0.0.2"), end); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Truncate(time.Millisecond)
	if err := s.MarkKilled(ctx, "s1", at, "timeout"); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"kill":   s.MarkKilled(ctx, "s1", at, "again"),
		"pause":  s.MarkPaused(ctx, "s1"),
		"endAt":  s.SetEndAt(ctx, "s1", end),
		"absent": s.MarkKilled(ctx, "zz", at, "x"),
	} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s after kill: %v, want ErrNotFound", name, err)
		}
	}
	got, err := s.GetSandbox(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateKilled || got.KillReason != "timeout" || !got.KilledAt.Equal(at) || !got.EndAt.Equal(end) {
		t.Fatalf("killed record = %+v", got)
	}
}

func TestListFiltersAndCursor(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	base := time.UnixMilli(1_700_000_000_000).UTC()
	for i, id := range []string{"a", "b", "c", "d"} {
		r := rec(id, base.Add(time.Duration(i/2)*time.Second), map[string]string{"n": id, "all": "x"})
		if err := s.InsertSandbox(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkPaused(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	ids := func(f SandboxFilter) []string {
		t.Helper()
		got, err := s.ListSandboxes(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range got {
			out = append(out, r.ID)
		}
		return out
	}
	cases := []struct {
		name string
		f    SandboxFilter
		want []string
	}{
		{"desc ties by id", SandboxFilter{Descending: true}, []string{"d", "c", "b", "a"}},
		{"asc", SandboxFilter{}, []string{"a", "b", "c", "d"}},
		{"running", SandboxFilter{States: []State{StateRunning}}, []string{"a", "b", "c"}},
		{"started after inclusive", SandboxFilter{StartedAfter: base.Add(time.Second)}, []string{"c", "d"}},
		{"metadata", SandboxFilter{Metadata: map[string]string{"n": "b", "all": "x"}}, []string{"b"}},
		{"metadata miss", SandboxFilter{Metadata: map[string]string{"n": "zz"}}, nil},
		{"limit", SandboxFilter{Descending: true, Limit: 2}, []string{"d", "c"}},
		{"after desc", SandboxFilter{Descending: true, After: &Cursor{StartedAt: base.Add(time.Second), ID: "c"}}, []string{"b", "a"}},
		{"after asc", SandboxFilter{After: &Cursor{StartedAt: base, ID: "a"}}, []string{"b", "c", "d"}},
		{"template alias", SandboxFilter{Templates: []string{"base"}}, []string{"a", "b", "c", "d"}},
		{"template unknown", SandboxFilter{Templates: []string{"other"}}, nil},
	}
	for _, c := range cases {
		if got := ids(c.f); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestAPIKeys(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	k := APIKey{ID: "k1", Name: "default", Hash: []byte{1, 2, 3}, Mask: "e2b_…abcd", CreatedAt: time.Now()}
	if err := s.InsertAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.InsertAPIKey(ctx, APIKey{ID: "k2", Hash: []byte{1, 2, 3}, CreatedAt: time.Now()}); err == nil {
		t.Fatal("duplicate hash accepted")
	}
	if err := s.TouchAPIKey(ctx, "k1", time.Now()); err != nil {
		t.Fatal(err)
	}
	active, err := s.ActiveAPIKeys(ctx)
	if err != nil || len(active) != 1 || active[0].LastUsedAt.IsZero() {
		t.Fatalf("active = %+v, %v", active, err)
	}
	if err := s.RevokeAPIKey(ctx, "k1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeAPIKey(ctx, "missing", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke missing: %v", err)
	}
	active, _ = s.ActiveAPIKeys(ctx)
	all, _ := s.ListAPIKeys(ctx)
	if len(active) != 0 || len(all) != 1 || !all[0].Revoked() {
		t.Fatalf("after revoke: active %d, all %+v", len(active), all)
	}
}

func TestTemplates(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	old := Template{ID: "t-old", Name: "base", RootfsDir: "/a", BuiltAt: time.UnixMilli(1000)}
	cur := Template{ID: "t-new", Name: "base", Aliases: []string{"b", "team/base"}, RootfsDir: "/b", BuiltAt: time.UnixMilli(2000), SizeBytes: 42}
	for _, tp := range []Template{old, cur} {
		if err := s.PutTemplate(ctx, tp); err != nil {
			t.Fatal(err)
		}
	}
	for ref, want := range map[string]string{"base": "t-new", "t-old": "t-old", "team/base": "t-new", "b": "t-new"} {
		got, err := s.FindTemplate(ctx, ref)
		if err != nil || got.ID != want {
			t.Errorf("FindTemplate(%q) = %s, %v; want %s", ref, got.ID, err, want)
		}
	}
	if _, err := s.FindTemplate(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	cur.Digest = "sha256:x"
	if err := s.PutTemplate(ctx, cur); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTemplate(ctx, "t-new")
	if err != nil || got.Digest != "sha256:x" || got.SizeBytes != 42 || len(got.Aliases) != 2 {
		t.Fatalf("after upsert: %+v, %v", got, err)
	}
	if err := s.DeleteTemplate(ctx, "t-old"); err != nil {
		t.Fatal(err)
	}
	list, _ := s.ListTemplates(ctx)
	if len(list) != 1 {
		t.Fatalf("list after delete: %+v", list)
	}
}
