package controlplane

import (
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/admission"
)

func TestSnapshotRefs(t *testing.T) {
	for _, c := range []struct {
		ref, want string
		ok        bool
	}{
		{"abc:default", "abc", true},
		{"abc", "abc", true},
		{"team/name:default", "name", true},
		{"team/name", "name", true},
		{"other/name:default", "name", false},
		{"name:v2", "", false},
		{"team/", "", false},
		{"", "", false},
	} {
		got, ok := snapshotRef("team", c.ref)
		if got != c.want || ok != c.ok {
			t.Errorf("snapshotRef(%q) = %q %v, want %q %v", c.ref, got, ok, c.want, c.ok)
		}
	}
}

func TestSnapshotRoutes(t *testing.T) {
	h := newHarness(t, Config{})
	src := h.create(map[string]any{})
	if r := h.do("POST", "/sandboxes/"+src+"/snapshots", map[string]any{"name": "bad/name"}); r.status != 400 {
		t.Fatalf("bad name: %d", r.status)
	}
	var named, unnamed snapshotView
	h.do("POST", "/sandboxes/"+src+"/snapshots", map[string]any{"name": "one"}).json(t, &named)
	h.do("POST", "/sandboxes/"+src+"/snapshots", nil).json(t, &unnamed)
	if !strings.HasSuffix(named.SnapshotID, "/one:default") || len(named.Names) != 1 || named.Mode != "filesystem" || len(unnamed.Names) != 0 {
		t.Fatalf("records %+v %+v", named, unnamed)
	}
	kid := h.create(map[string]any{"templateID": named.SnapshotID})
	if got := h.fake.lastCreate().Snapshot; got == "" || strings.HasPrefix(unnamed.SnapshotID, got) {
		t.Fatalf("create from the named snapshot passed snapshot %q to the backend", got)
	}
	r := h.do("GET", "/snapshots?limit=1", nil)
	var page []snapshotView
	r.json(t, &page)
	if len(page) != 1 || page[0].SnapshotID != unnamed.SnapshotID || r.header.Get("X-Next-Token") == "" {
		t.Fatalf("page 1: %+v %v", page, r.header)
	}
	h.do("GET", "/snapshots?limit=1&nextToken="+r.header.Get("X-Next-Token"), nil).json(t, &page)
	if len(page) != 1 || page[0].SnapshotID != named.SnapshotID {
		t.Fatalf("page 2: %+v", page)
	}
	if r := h.do("GET", "/snapshots?limit=0", nil); r.status != 400 {
		t.Fatalf("limit 0: %d", r.status)
	}
	other := h.teamKey("other")
	if r := h.doKey(other, "DELETE", "/templates/"+url.PathEscape(named.SnapshotID), nil); r.status != 404 {
		t.Fatalf("other team deletes: %d", r.status)
	}
	if r := h.do("DELETE", "/templates/"+url.PathEscape(named.SnapshotID), nil); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
	if r := h.do("POST", "/v2/sandboxes", map[string]any{"templateID": named.SnapshotID}); r.status != 404 {
		t.Fatalf("create from deleted: %d", r.status)
	}
	if r := h.do("POST", "/sandboxes/"+kid+"/pause", nil); r.status != 204 {
		t.Fatalf("pause: %d", r.status)
	}
	if r := h.do("POST", "/sandboxes/"+kid+"/snapshots", nil); r.status != 409 {
		t.Fatalf("snapshot of a paused sandbox: %d, want 409", r.status)
	}
}

// TestSnapshotsNewestFirst: snapshots taken faster than the stores' clock
// resolution (milliseconds; the fake backend snapshots at once) list in the
// reverse order of their creation, across pages.
func TestSnapshotsNewestFirst(t *testing.T) {
	h := newHarness(t, Config{})
	src := h.create(map[string]any{})
	var ids []string
	for range 20 {
		var sn snapshotView
		h.do("POST", "/sandboxes/"+src+"/snapshots", nil).json(t, &sn)
		ids = append(ids, sn.SnapshotID)
	}
	var got []string
	next := ""
	for range len(ids) {
		r := h.do("GET", "/snapshots?limit=3&nextToken="+next, nil)
		var page []snapshotView
		r.json(t, &page)
		for _, sn := range page {
			got = append(got, sn.SnapshotID)
		}
		if next = r.header.Get("X-Next-Token"); next == "" {
			break
		}
	}
	slices.Reverse(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("listed %v\nwant newest first %v", got, ids)
	}
}

func TestForkRoutes(t *testing.T) {
	h := newHarness(t, Config{Admission: admission.Limits{TeamSandboxes: 3}})
	src := h.create(map[string]any{"envVars": map[string]string{"K": "v"}})
	for _, n := range []int{0, 101, -1} {
		if r := h.do("POST", "/sandboxes/"+src+"/fork", map[string]any{"count": n}); r.status != 400 {
			t.Fatalf("count %d: %d", n, r.status)
		}
	}
	var res []struct {
		Sandbox *struct {
			SandboxID string `json:"sandboxID"`
		} `json:"sandbox"`
		Error *forkError `json:"error"`
	}
	h.do("POST", "/sandboxes/"+src+"/fork", map[string]any{"count": 3}).json(t, &res)
	ok, refused := 0, 0
	for _, r := range res {
		switch {
		case r.Sandbox != nil && r.Sandbox.SandboxID != src:
			ok++
		case r.Error != nil && r.Error.Code == 429:
			refused++
		}
	}
	if len(res) != 3 || ok != 2 || refused != 1 {
		t.Fatalf("forks over a limit of 3 sandboxes: %+v", res)
	}
	if r := h.do("GET", "/snapshots", nil); strings.TrimSpace(string(r.body)) != "[]" {
		t.Fatalf("the fork's capture is listed: %s", r.body)
	}
	if r := h.doKey(h.teamKey("other"), "POST", "/sandboxes/"+src+"/fork", map[string]any{"count": 1}); r.status != 404 {
		t.Fatalf("other team forks: %d", r.status)
	}
}

func TestVolumeRoutes(t *testing.T) {
	h := newHarness(t, Config{})
	for _, b := range []map[string]any{{"name": "bad name"}, {"name": ""}, {"name": "ok", "sizeMB": 1}} {
		if r := h.do("POST", "/volumes", b); r.status != 400 {
			t.Fatalf("create %v: %d", b, r.status)
		}
	}
	var v volumeView
	h.do("POST", "/volumes", map[string]any{"name": "data"}).json(t, &v)
	if v.Token == "" || v.SizeBytes != 1024<<20 {
		t.Fatalf("volume %+v", v)
	}
	if r := h.do("POST", "/volumes", map[string]any{"name": "data"}); r.status != 409 {
		t.Fatalf("same name: %d", r.status)
	}
	content := func(method, op, query, body, token string) response {
		req := httptest.NewRequest(method, "/volumecontent/"+v.VolumeID+"/"+op+"?"+query, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.svc.VolumeContentHandler().ServeHTTP(rec, req)
		return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	}
	if r := content("PUT", "file", "path=/a/b.txt", "x", v.Token); r.status != 404 {
		t.Fatalf("write without parents: %d %s", r.status, r.body)
	}
	if r := content("PUT", "file", "path=/a/b.txt&force=true&mode=384", "hello", v.Token); r.status != 201 || !strings.Contains(string(r.body), `"mode":384`) {
		t.Fatalf("write: %d %s", r.status, r.body)
	}
	if r := content("GET", "file", "path=a/b.txt", "", v.Token); r.status != 200 || string(r.body) != "hello" {
		t.Fatalf("read: %d %s", r.status, r.body)
	}
	if r := content("GET", "file", "path=a/b.txt", "", "nope"); r.status != 401 {
		t.Fatalf("bad token: %d", r.status)
	}
	for _, p := range []string{"../x", "a/../../x", ""} {
		if r := content("GET", "path", "path="+url.QueryEscape(p), "", v.Token); r.status != 400 {
			t.Fatalf("path %q: %d", p, r.status)
		}
	}
	if r := content("DELETE", "path", "path=/", "", v.Token); r.status != 400 {
		t.Fatalf("remove the root: %d", r.status)
	}
	src := h.create(map[string]any{"volumeMounts": []map[string]string{{"name": "data", "path": "/mnt/data"}}})
	if got := h.fake.lastCreate().Volumes; len(got) != 1 || got[0].ID != v.VolumeID || got[0].Path != "/mnt/data" {
		t.Fatalf("backend volumes %+v", got)
	}
	if r := h.do("GET", "/sandboxes/"+src, nil); !strings.Contains(string(r.body), `"volumeMounts":[{"name":"data","path":"/mnt/data"}]`) {
		t.Fatalf("getInfo: %s", r.body)
	}
	h.do("POST", "/sandboxes/"+src+"/fork", map[string]any{"count": 1})
	if got := h.fake.lastCreate().Volumes; len(got) != 1 || got[0].ID != v.VolumeID {
		t.Fatalf("fork's volumes %+v", got)
	}
	for _, m := range []map[string]string{{"name": "nope", "path": "/x"}, {"name": "data", "path": "/proc/x"}, {"name": "data", "path": "x"}} {
		if r := h.do("POST", "/v2/sandboxes", map[string]any{"volumeMounts": []map[string]string{m}}); r.status != 400 {
			t.Fatalf("mount %v: %d", m, r.status)
		}
	}
	if r := h.do("DELETE", "/volumes/data", nil); r.status != 409 {
		t.Fatalf("delete in use: %d", r.status)
	}
	if r := h.doKey(h.teamKey("other"), "GET", "/volumes/data", nil); r.status != 404 {
		t.Fatalf("other team: %d", r.status)
	}
	for _, id := range h.fake.ids() {
		h.do("DELETE", "/sandboxes/"+id, nil)
	}
	if r := h.do("DELETE", "/volumes/data", nil); r.status != 204 {
		t.Fatalf("delete: %d", r.status)
	}
}
