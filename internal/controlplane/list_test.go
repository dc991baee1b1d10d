package controlplane

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/internal/store"
)

type listed struct {
	SandboxID   string            `json:"sandboxID"`
	TemplateID  string            `json:"templateID"`
	ClientID    string            `json:"clientID"`
	EnvdVersion string            `json:"envdVersion"`
	State       string            `json:"state"`
	StartedAt   time.Time         `json:"startedAt"`
	Metadata    map[string]string `json:"metadata"`
}

func (h *harness) list(t *testing.T, query string) ([]listed, string) {
	t.Helper()
	r := h.do("GET", "/v2/sandboxes"+query, nil)
	if r.status != http.StatusOK {
		t.Fatalf("list %s: %d %s", query, r.status, r.body)
	}
	var out []listed
	r.json(t, &out)
	if _, ok := r.header["X-Next-Token"]; ok && r.header.Get("X-Next-Token") == "" {
		t.Fatal("empty X-Next-Token header sent")
	}
	return out, r.header.Get("X-Next-Token")
}

func ids(ls []listed) []string {
	out := []string{}
	for _, l := range ls {
		out = append(out, l.SandboxID)
	}
	return out
}

func TestListPaginationLimitOne(t *testing.T) {
	h := newHarness(t, Config{})
	a := h.create(map[string]any{})
	b := h.create(map[string]any{})
	ra, rb := h.record(a), h.record(b)
	// Expected order: newest first, ties by ID descending.
	want := []store.Sandbox{ra, rb}
	sort.Slice(want, func(i, j int) bool {
		if !want[i].StartedAt.Equal(want[j].StartedAt) {
			return want[i].StartedAt.After(want[j].StartedAt)
		}
		return want[i].ID > want[j].ID
	})
	page1, tok := h.list(t, "?limit=1")
	if len(page1) != 1 || page1[0].SandboxID != want[0].ID || tok == "" {
		t.Fatalf("page 1 = %v, token %q; want %s", ids(page1), tok, want[0].ID)
	}
	page2, tok2 := h.list(t, "?limit=1&nextToken="+url.QueryEscape(tok))
	if len(page2) != 1 || page2[0].SandboxID != want[1].ID || tok2 != "" {
		t.Fatalf("page 2 = %v, token %q; want %s and no token", ids(page2), tok2, want[1].ID)
	}
	all, tok3 := h.list(t, "?limit=2")
	if len(all) != 2 || tok3 != "" {
		t.Fatalf("limit 2 = %v, token %q", ids(all), tok3)
	}
	asc, _ := h.list(t, "?order=asc")
	if !reflect.DeepEqual(ids(asc), []string{want[1].ID, want[0].ID}) {
		t.Fatalf("asc = %v", ids(asc))
	}
	l := page1[0]
	if l.ClientID != clientID || l.EnvdVersion == "" || l.State != "running" || l.TemplateID != "tplbase1" || l.Metadata == nil {
		t.Fatalf("listed fields = %+v", l)
	}
}

func TestListStartedAfterInclusive(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{})
	started := h.record(id).StartedAt
	// As the JS SDK sends it: Date.toISOString(), millisecond precision.
	js := started.UTC().Format("2006-01-02T15:04:05.000Z")
	got, _ := h.list(t, "?startedAfter="+url.QueryEscape(js))
	if !reflect.DeepEqual(ids(got), []string{id}) {
		t.Fatalf("startedAfter=own startedAt: %v", ids(got))
	}
	// As Python sends it: isoformat with an offset and microseconds.
	py := started.In(time.FixedZone("", 2*3600)).Format("2006-01-02T15:04:05.000000-07:00")
	got, _ = h.list(t, "?startedAfter="+url.QueryEscape(py))
	if len(got) != 1 {
		t.Fatalf("python-style startedAfter: %v", ids(got))
	}
	later := started.Add(time.Second).UTC().Format("2006-01-02T15:04:05.000Z")
	got, _ = h.list(t, "?startedAfter="+url.QueryEscape(later))
	if len(got) != 0 {
		t.Fatalf("startedAfter=+1s: %v", ids(got))
	}
}

func TestListMetadataStateTemplate(t *testing.T) {
	h := newHarness(t, Config{})
	match := h.create(map[string]any{"metadata": map[string]string{"k y": "v&1", "other": "x"}})
	near := h.create(map[string]any{"metadata": map[string]string{"k y": "v"}})
	ci := h.create(map[string]any{"templateID": "code-interpreter-v1"})
	paused := h.create(map[string]any{})
	if r := h.do("POST", "/sandboxes/"+paused+"/pause", nil); r.status != 204 {
		t.Fatalf("pause: %d", r.status)
	}
	// The exact query the JS SDK sent in the capture (docs/wire/e2b-api.md §2.4).
	got, _ := h.list(t, "?metadata=k%252520y%3Dv%2525261&state=running,paused&limit=5")
	if !reflect.DeepEqual(ids(got), []string{match}) || got[0].Metadata["k y"] != "v&1" {
		t.Fatalf("metadata filter = %+v", got)
	}
	// The same filter built the way the SDKs build it.
	inner := url.QueryEscape(url.QueryEscape("k y")) + "=" + url.QueryEscape(url.QueryEscape("v"))
	got, _ = h.list(t, "?"+url.Values{"metadata": {inner}}.Encode())
	if !reflect.DeepEqual(ids(got), []string{near}) {
		t.Fatalf("metadata k y=v: %v", ids(got))
	}
	if got, _ := h.list(t, "?state=paused"); !reflect.DeepEqual(ids(got), []string{paused}) {
		t.Fatalf("state=paused: %v", ids(got))
	}
	if got, _ := h.list(t, ""); len(got) != 4 {
		t.Fatalf("default states: %v", ids(got))
	}
	if got, _ := h.list(t, "?state=running"); len(got) != 3 {
		t.Fatalf("state=running: %v", ids(got))
	}
	if got, _ := h.list(t, "?template=code-interpreter-v1"); !reflect.DeepEqual(ids(got), []string{ci}) {
		t.Fatalf("template alias: %v", ids(got))
	}
	if got, _ := h.list(t, "?template=tplci1"); !reflect.DeepEqual(ids(got), []string{ci}) {
		t.Fatalf("template id: %v", ids(got))
	}
	if got, _ := h.list(t, "?template=base-alias"); len(got) != 3 {
		t.Fatalf("other alias of base: %v", ids(got))
	}
	r := h.do("GET", "/v2/sandboxes?template=unknown", nil)
	if r.status != 200 || strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("unknown template: %d %s", r.status, r.body)
	}
	v1 := h.do("GET", "/sandboxes?metadata=other%3Dx", nil)
	var v1l []listed
	v1.json(t, &v1l)
	if v1.status != 200 || !reflect.DeepEqual(ids(v1l), []string{match}) {
		t.Fatalf("v1 list: %d %s", v1.status, v1.body)
	}
	v1 = h.do("GET", "/sandboxes", nil)
	v1.json(t, &v1l)
	if len(v1l) != 3 {
		t.Fatalf("v1 list includes paused: %s", v1.body)
	}
}

func TestListBadQueries(t *testing.T) {
	h := newHarness(t, Config{})
	for _, q := range []string{
		"template=base:latest", "limit=0", "limit=101", "limit=x", "order=sideways",
		"state=running,deleted", "nextToken=!!!", "nextToken=" + url.QueryEscape(encodeNextToken(store.Cursor{ID: "UPPER"})),
		"startedAfter=yesterday", "metadata=%25zz", "metadata=novalue", "metadata=" + url.QueryEscape("a=1&a=2"),
	} {
		wantError(t, h.do("GET", "/v2/sandboxes?"+q, nil), 400)
	}
	wantError(t, h.do("GET", "/sandboxes?metadata=%25zz", nil), 400)
	if r := h.do("GET", "/v2/sandboxes?unknownParam=1&source=ci", nil); r.status != 200 {
		t.Fatalf("unknown params: %d", r.status)
	}
}

func TestDecodeMetadataFilter(t *testing.T) {
	cases := []struct {
		raw     string
		want    map[string]string
		wantErr bool
	}{
		{"k%2520y=v%25261", map[string]string{"k y": "v&1"}, false}, // after the normal query decode
		{"a=1&b=2", map[string]string{"a": "1", "b": "2"}, false},
		{"", map[string]string{}, false},
		{"a=1&&b=", map[string]string{"a": "1", "b": ""}, false},
		{"a%253Db=c%253Dd", map[string]string{"a=b": "c=d"}, false},
		{"a", nil, true},
		{"=v", nil, true},
		{"a=1&a=1", nil, true},
		{"%zz", nil, true},
		{"a=%25zz", nil, true},
	}
	for _, c := range cases {
		got, err := decodeMetadataFilter(c.raw)
		if (err != nil) != c.wantErr || (!c.wantErr && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("decodeMetadataFilter(%q) = %v, %v; want %v, err %v", c.raw, got, err, c.want, c.wantErr)
		}
	}
}

func TestNextTokenRoundTrip(t *testing.T) {
	c := store.Cursor{StartedAt: time.UnixMilli(1_700_000_000_123).UTC(), ID: "abc123"}
	got, err := decodeNextToken(encodeNextToken(c))
	if err != nil || !got.StartedAt.Equal(c.StartedAt) || got.ID != c.ID {
		t.Fatalf("round trip = %+v, %v", got, err)
	}
	for _, bad := range []string{"", "!!", encodeNextToken(store.Cursor{ID: ""}), "bm90LWEtdG9rZW4"} {
		if _, err := decodeNextToken(bad); err == nil {
			t.Errorf("decodeNextToken(%q) accepted", bad)
		}
	}
}

func TestParseListQueryDefaults(t *testing.T) {
	q, err := parseListQuery(api.ListSandboxesV2Params{})
	if err != nil || !q.descending || q.limit != 100 || len(q.states) != 2 || q.after != nil {
		t.Fatalf("defaults = %+v, %v", q, err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 123_456_789, time.UTC)
	q, err = parseListQuery(api.ListSandboxesV2Params{StartedAfter: &at})
	if err != nil || !q.startedAfter.Equal(at.Truncate(time.Millisecond)) {
		t.Fatalf("startedAfter = %v, %v", q.startedAfter, err)
	}
}

// FuzzListQuery sends arbitrary raw queries to GET /v2/sandboxes: the answer must
// be 200 with a JSON array or 400 with the JSON error body, never a 5xx.
func FuzzListQuery(f *testing.F) {
	for _, seed := range []string{
		"metadata=k%252520y%3Dv%2525261&state=running,paused&limit=5",
		"limit=1", "order=asc", "template=base", "template=a:b", "state=", "startedAfter=2026-01-01T00:00:00.000Z",
		"nextToken=MjAyNi0wMS0wMVQwMDowMDowMFpfX2FiYw", "metadata=%25", "limit=-1", "metadata=a%3D1%26b%3D2",
	} {
		f.Add(seed)
	}
	h := newHarness(f, Config{})
	ctx := context.Background()
	for _, meta := range []map[string]string{{"a": "1"}, {"k y": "v&1"}} {
		sp := createSpec{template: "base", ttl: time.Hour, metadata: meta, envVars: map[string]string{}}
		if _, err := h.svc.create(ctx, sp); err != nil {
			f.Fatal(err)
		}
	}
	handler := h.svc.Handler()
	f.Fuzz(func(t *testing.T, rawQuery string) {
		req := httptest.NewRequest("GET", "/v2/sandboxes", nil)
		req.URL.RawQuery = rawQuery
		req.Header.Set("X-API-KEY", h.key)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		switch rec.Code {
		case http.StatusOK:
			var out []api.ListedSandbox
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("200 body %q: %v", rec.Body, err)
			}
			if tok := rec.Header().Get("X-Next-Token"); tok != "" {
				if _, err := decodeNextToken(tok); err != nil {
					t.Fatalf("undecodable next token %q", tok)
				}
			}
		case http.StatusBadRequest:
			var e api.Error
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != 400 || e.Message == "" {
				t.Fatalf("400 body %q: %v", rec.Body, err)
			}
		default:
			t.Fatalf("query %q: status %d body %s", rawQuery, rec.Code, rec.Body)
		}
	})
}

// FuzzNextToken checks that decoding never panics, that every accepted token
// re-encodes to an equivalent cursor, and that encoded cursors decode exactly.
func FuzzNextToken(f *testing.F) {
	f.Add("", int64(0), "abc")
	f.Add(encodeNextToken(store.Cursor{StartedAt: time.UnixMilli(1_700_000_000_123), ID: "abc123"}), int64(1_700_000_000_123), "z9")
	f.Add("MjAyNi0wMS0wMVQwMDowMDowMFpfX2FiYw==", int64(-5), "")
	f.Add("____", int64(253402300799999), "a_b")
	f.Fuzz(func(t *testing.T, tok string, ms int64, id string) {
		if c, err := decodeNextToken(tok); err == nil {
			again, err := decodeNextToken(encodeNextToken(c))
			if err != nil || !again.StartedAt.Equal(c.StartedAt) || again.ID != c.ID {
				t.Fatalf("token %q: %+v re-decoded as %+v, %v", tok, c, again, err)
			}
		}
		at := time.UnixMilli(ms).UTC()
		if at.Year() < 0 || at.Year() > 9999 || !sandboxid.Valid(id) {
			return // not representable in RFC 3339 / not a sandbox ID
		}
		c, err := decodeNextToken(encodeNextToken(store.Cursor{StartedAt: at, ID: id}))
		if err != nil || !c.StartedAt.Equal(at) || c.ID != id {
			t.Fatalf("cursor %v/%s decoded as %+v, %v", at, id, c, err)
		}
	})
}

// FuzzMetadataRoundTrip encodes a pair the way the SDKs do and checks the
// server-side decoding gives it back.
func FuzzMetadataRoundTrip(f *testing.F) {
	f.Add("k y", "v&1")
	f.Add("a=b", "%zz+")
	f.Add("ünï", "")
	f.Fuzz(func(t *testing.T, k, v string) {
		if k == "" {
			return
		}
		inner := url.QueryEscape(url.QueryEscape(k)) + "=" + url.QueryEscape(url.QueryEscape(v))
		query := url.Values{"metadata": {inner}}.Encode()
		vals, err := url.ParseQuery(query)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeMetadataFilter(vals.Get("metadata"))
		if err != nil || len(got) != 1 || got[k] != v {
			t.Fatalf("(%q, %q) decoded as %v, %v", k, v, got, err)
		}
	})
}
