package storetest

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

func testSandboxRoundTrip(t *testing.T, s Store) {
	ctx := context.Background()
	allow := false
	in := Rec("abc", time.UnixMilli(1_700_000_000_123).UTC(), map[string]string{"k y": "v&1"})
	in.AllowInternetAccess = &allow
	in.Network = []byte(`{"allowPublicTraffic":false}`)
	in.TrafficToken, in.PrivateTraffic = "traffic", true
	in.Addr = netip.MustParseAddr("10.77.0.5")
	in.Lifecycle = store.Lifecycle{OnTimeout: "pause", AutoResume: true}
	insert(t, s, in)
	got, err := s.GetSandbox(ctx, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
	}
	if _, err := s.GetSandbox(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if err := s.InsertSandbox(ctx, in); err == nil {
		t.Fatal("duplicate ID accepted")
	}
	noTeam := Rec("noteam", time.UnixMilli(1_700_000_000_000).UTC(), nil)
	noTeam.Team = ""
	insert(t, s, noTeam)
	if got, _ := s.GetSandbox(ctx, "noteam"); got.Team != store.DefaultTeam || got.Metadata == nil || got.Network != nil {
		t.Fatalf("record without team, metadata or network read back as %+v", got)
	}
}

func testTransitions(t *testing.T, s Store) {
	ctx := context.Background()
	insert(t, s, Rec("s1", time.Now(), nil))
	addr := netip.MustParseAddr("10.0.0.9")
	start := time.Now().Truncate(time.Millisecond).UTC()
	if err := s.MarkStarted(ctx, "s1", addr, "runc", start, start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetSandbox(ctx, "s1"); got.Addr != addr || got.Runtime != "runc" || !got.StartedAt.Equal(start) {
		t.Fatalf("after MarkStarted: %+v", got)
	}
	if err := s.MarkPaused(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkPaused(ctx, "s1"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("pause paused: %v, want ErrConflict", err)
	}
	if err := s.SetAddr(ctx, "s1", netip.MustParseAddr("10.0.0.3"), "runsc"); err != nil {
		t.Fatalf("set addr of a paused sandbox: %v", err)
	}
	end := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := s.MarkResumed(ctx, "s1", netip.MustParseAddr("10.0.0.2"), end); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkResumed(ctx, "s1", addr, end); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("resume running: %v, want ErrConflict", err)
	}
	at := time.Now().Truncate(time.Millisecond)
	if err := s.MarkKilled(ctx, "s1", at, "timeout"); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"kill":    s.MarkKilled(ctx, "s1", at, "again"),
		"pause":   s.MarkPaused(ctx, "s1"),
		"endAt":   s.SetEndAt(ctx, "s1", end),
		"started": s.MarkStarted(ctx, "s1", addr, "runc", at, end),
		"absent":  s.MarkKilled(ctx, "zz", at, "x"),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s after kill: %v, want ErrNotFound", name, err)
		}
	}
	got, err := s.GetSandbox(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != store.StateKilled || got.KillReason != "timeout" || !got.KilledAt.Equal(at) || !got.EndAt.Equal(end) ||
		got.Addr != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("killed record = %+v", got)
	}
}

// testExpiry: MarkExpired applies only to a running sandbox past its deadline.
func testExpiry(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	due, later, paused := Rec("due", now.Add(-time.Minute), nil), Rec("later", now, nil), Rec("paused", now.Add(-time.Hour), nil)
	insert(t, s, due, later, paused)
	if err := s.MarkPaused(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkExpired(ctx, "due", now, "timeout"); err != nil {
		t.Fatalf("expire a due sandbox: %v", err)
	}
	if got, _ := s.GetSandbox(ctx, "due"); got.State != store.StateKilled || got.KillReason != "timeout" || got.AccessToken != "" {
		t.Fatalf("expired record = %+v", got)
	}
	for id, want := range map[string]error{"later": store.ErrConflict, "paused": store.ErrConflict, "due": store.ErrNotFound, "zz": store.ErrNotFound} {
		if err := s.MarkExpired(ctx, id, now, "timeout"); !errors.Is(err, want) {
			t.Errorf("expire %s: %v, want %v", id, err, want)
		}
	}
	if got, _ := s.GetSandbox(ctx, "later"); got.State != store.StateRunning {
		t.Fatalf("a sandbox before its deadline was expired: %+v", got)
	}
}

// testRacingKills: of concurrent kills of one sandbox exactly one succeeds;
// the others get ErrNotFound, as a second kill gets from one server.
func testRacingKills(t *testing.T, s Store) {
	ctx := context.Background()
	insert(t, s, Rec("r1", time.Now(), nil))
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = s.MarkKilled(ctx, "r1", time.Now(), "killed by request") })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, store.ErrNotFound):
			t.Errorf("losing kill: %v, want ErrNotFound", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d racing kills succeeded, want 1", won, n)
	}
}

// testRacingExpiry: an expiry racing with a deadline extension either kills
// the sandbox (and the extension then gets ErrNotFound) or loses to it (and
// the sandbox runs on with the new deadline); never both.
func testRacingExpiry(t *testing.T, s Store) {
	ctx := context.Background()
	for i := range 20 {
		id := "x" + string(rune('a'+i))
		now := time.Now().Truncate(time.Millisecond)
		insert(t, s, Rec(id, now.Add(-2*time.Minute), nil))
		var expireErr, extendErr error
		var wg sync.WaitGroup
		wg.Go(func() { expireErr = s.MarkExpired(ctx, id, now, "timeout") })
		wg.Go(func() { extendErr = s.SetEndAt(ctx, id, now.Add(time.Hour)) })
		wg.Wait()
		got, err := s.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case expireErr == nil && errors.Is(extendErr, store.ErrNotFound) && got.State == store.StateKilled:
		case extendErr == nil && errors.Is(expireErr, store.ErrConflict) && got.State == store.StateRunning:
		default:
			t.Fatalf("race %d: expire %v, extend %v, record %s", i, expireErr, extendErr, got.State)
		}
	}
}

func testListFiltersAndCursor(t *testing.T, s Store) {
	ctx := context.Background()
	base := time.UnixMilli(1_700_000_000_000).UTC()
	for i, id := range []string{"a", "b", "c", "d"} {
		insert(t, s, Rec(id, base.Add(time.Duration(i/2)*time.Second), map[string]string{"n": id, "all": "x"}))
	}
	if err := s.MarkPaused(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	ids := func(f store.SandboxFilter) []string {
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
		f    store.SandboxFilter
		want []string
	}{
		{"desc ties by id", store.SandboxFilter{Descending: true}, []string{"d", "c", "b", "a"}},
		{"asc", store.SandboxFilter{}, []string{"a", "b", "c", "d"}},
		{"running", store.SandboxFilter{States: []store.State{store.StateRunning}}, []string{"a", "b", "c"}},
		{"started after inclusive", store.SandboxFilter{StartedAfter: base.Add(time.Second)}, []string{"c", "d"}},
		{"metadata", store.SandboxFilter{Metadata: map[string]string{"n": "b", "all": "x"}}, []string{"b"}},
		{"metadata miss", store.SandboxFilter{Metadata: map[string]string{"n": "zz"}}, nil},
		{"metadata limit", store.SandboxFilter{Metadata: map[string]string{"n": "a"}, Descending: true, Limit: 1}, []string{"a"}},
		{"limit", store.SandboxFilter{Descending: true, Limit: 2}, []string{"d", "c"}},
		{"after desc", store.SandboxFilter{Descending: true, After: &store.Cursor{StartedAt: base.Add(time.Second), ID: "c"}}, []string{"b", "a"}},
		{"after asc", store.SandboxFilter{After: &store.Cursor{StartedAt: base, ID: "a"}}, []string{"b", "c", "d"}},
		{"template alias", store.SandboxFilter{Templates: []string{"base"}}, []string{"a", "b", "c", "d"}},
		{"template id", store.SandboxFilter{Templates: []string{"tpl1"}, Limit: 1}, []string{"a"}},
		{"template unknown", store.SandboxFilter{Templates: []string{"other"}}, nil},
		{"other team", store.SandboxFilter{Team: "other"}, nil},
	}
	for _, c := range cases {
		if got := ids(c.f); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

// testKilledDropsSecrets: a killed (or expired) sandbox's record keeps no
// access token, traffic token or env var; a live one keeps them.
func testKilledDropsSecrets(t *testing.T, s Store) {
	ctx := context.Background()
	const secret = "s3cr3t-7f1e9a"
	insert(t, s, SecretRec("k1", secret), SecretRec("k2", secret), SecretRec("live1", "still-running-2b4d"))
	if err := s.MarkKilled(ctx, "k1", time.Now(), "killed by request"); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkExpired(ctx, "k2", time.Now().Add(time.Hour), "timeout"); err != nil {
		t.Fatal(err)
	}
	if err := s.TruncateWAL(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"k1", "k2"} {
		got, err := s.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.AccessToken != "" || got.TrafficToken != "" || len(got.EnvVars) != 0 || got.EnvVars == nil {
			t.Fatalf("killed record keeps secrets: %+v", got)
		}
	}
	if live, _ := s.GetSandbox(ctx, "live1"); live.AccessToken == "" || live.EnvVars["OPENAI_API_KEY"] == "" {
		t.Fatalf("a running sandbox lost its secrets: %+v", live)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
}
