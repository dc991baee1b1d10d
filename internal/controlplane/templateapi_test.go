package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/builds"
	"github.com/cubby-dev/cubby/internal/outbound"
	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/template"
)

// fakeTemplates is a TemplateStore and TemplateSource over a fixed set.
type fakeTemplates struct{ builtTemplates }

func (f *fakeTemplates) Builds(id string) ([]template.Info, error) {
	i, err := f.Get(id)
	return []template.Info{i}, err
}
func (f *fakeTemplates) AssignTags(context.Context, string, []string) (string, error) {
	return "b", nil
}
func (f *fakeTemplates) RemoveTags(context.Context, string, []string) error { return nil }
func (f *fakeTemplates) Delete(context.Context, string) error               { return nil }
func (f *fakeTemplates) SetPublic(_ context.Context, id string, _ bool) (template.Info, error) {
	return f.Get(id)
}

// fakeBuilds records uploads; builds are never started.
type fakeBuilds struct {
	mu      sync.Mutex
	uploads map[string]string
}

func (f *fakeBuilds) Request(context.Context, builds.RequestParams) (store.TemplateBuild, error) {
	return store.TemplateBuild{}, errors.New("not used")
}
func (f *fakeBuilds) Build(context.Context, string, string, string) (store.TemplateBuild, error) {
	return store.TemplateBuild{}, builds.ErrNotFound
}
func (f *fakeBuilds) Start(context.Context, string, string, string, template.Spec) error { return nil }
func (f *fakeBuilds) Status(context.Context, string, string, string, int, int, string) (builds.Status, error) {
	return builds.Status{}, builds.ErrNotFound
}
func (f *fakeBuilds) Logs(context.Context, string, string, string, time.Time, int, bool, string) ([]template.Entry, error) {
	return nil, builds.ErrNotFound
}
func (f *fakeBuilds) HasFiles(id, hash string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.uploads[id+"/"+hash]
	return ok
}
func (f *fakeBuilds) Upload(_ context.Context, id, hash string, body io.Reader) error {
	b, err := io.ReadAll(body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.uploads[id+"/"+hash] = string(b)
	return err
}

func templateHarness(t *testing.T, cfg Config) (*harness, *fakeBuilds) {
	t.Helper()
	h := newHarness(t, cfg)
	h.stop()
	ft := &fakeTemplates{builtTemplates{
		{ID: template.IDFor("mine"), Name: "mine", Aliases: []string{"mine"}, Team: store.DefaultTeam, RootfsDir: "/rootfs/mine",
			User: "app", Workdir: "/srv", Env: map[string]string{"A": "template", "B": "template"}, StartCmd: "serve", ReadyCmd: "check"},
		{ID: template.IDFor("theirs"), Name: "theirs", Aliases: []string{"theirs"}, Team: "other", RootfsDir: "/rootfs/theirs"},
		{ID: template.IDFor("base"), Name: "base", Aliases: []string{"base"}, RootfsDir: "/rootfs/base"},
	}}
	fb := &fakeBuilds{uploads: map[string]string{}}
	h.resolver, h.tstore, h.builds = BuiltTemplates{Source: ft}, ft, fb
	h.start()
	return h, fb
}

// TestTemplateUploadSignature: the upload PUT needs no API key but the
// URL's signature, bound to the template, the hash and the expiry.
func TestTemplateUploadSignature(t *testing.T) {
	h, fb := templateHarness(t, Config{})
	id, hash := template.IDFor("mine"), strings.Repeat("ab", 32)
	var link struct{ URL string }
	if r := h.do("GET", "/templates/mine/files/"+hash, nil); r.status != 201 {
		t.Fatalf("link: %d %s", r.status, r.body)
	} else {
		r.json(t, &link)
	}
	u, err := url.Parse(link.URL)
	if err != nil || u.Path != "/templates/"+id+"/files/"+hash {
		t.Fatalf("url %q", link.URL)
	}
	put := func(path, query string) int {
		req, _ := http.NewRequest("PUT", h.srv.URL+path+"?"+query, bytes.NewReader([]byte("tarball")))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	q := u.Query()
	tampered := url.Values{"expires": q["expires"], "signature": {strings.Repeat("0", 64)}}
	expired := url.Values{"expires": {fmt.Sprint(time.Now().Add(-time.Minute).Unix())}, "signature": q["signature"]}
	for name, c := range map[string][2]string{
		"tampered": {u.Path, tampered.Encode()}, "expired": {u.Path, expired.Encode()},
		"other hash": {strings.Replace(u.Path, hash, strings.Repeat("cd", 32), 1), q.Encode()},
	} {
		if code := put(c[0], c[1]); code != 403 {
			t.Errorf("%s: %d, want 403", name, code)
		}
	}
	if len(fb.uploads) != 0 {
		t.Fatalf("refused uploads were stored: %v", fb.uploads)
	}
	if code := put(u.Path, q.Encode()); code != 200 || fb.uploads[id+"/"+hash] != "tarball" {
		t.Fatalf("signed upload: %d %v", code, fb.uploads)
	}
	var present struct{ Present bool }
	h.do("GET", "/templates/mine/files/"+hash, nil).json(t, &present)
	if !present.Present {
		t.Error("upload not reported present")
	}
	if r := h.doKey("", "GET", "/templates/mine/files/"+hash, nil); r.status != 401 {
		t.Errorf("link without a key: %d", r.status)
	}
	if r := h.do("GET", "/templates/mine/files/not-a-hash", nil); r.status != 400 {
		t.Errorf("bad hash: %d", r.status)
	}
}

// TestTemplateVisibility: another team's private template and its builds
// are absent (403 for exists, as E2B); built-ins are everyone's; both lists
// show what the team may use; the tags route is routed apart from the alias
// route.
func TestTemplateVisibility(t *testing.T) {
	h, _ := templateHarness(t, Config{})
	other := h.teamKey("other")
	for _, c := range []struct {
		key, path string
		want      int
	}{
		{h.key, "/templates/aliases/mine", 200}, {h.key, "/templates/aliases/theirs", 403}, {h.key, "/templates/aliases/base", 200},
		{h.key, "/templates/aliases/none", 404}, {other, "/templates/aliases/mine", 403}, {other, "/templates/aliases/theirs", 200},
		{h.key, "/templates/theirs", 404}, {h.key, "/templates/theirs/tags", 404}, {h.key, "/templates/mine/tags", 200},
		{h.key, "/templates/aliases/tags", 404}, {h.key, "/templates/base/builds/b1/status", 200},
		{h.key, "/templates/theirs/builds/b1/status", 404}, {other, "/templates/mine/builds/b1/status", 404},
		{h.key, "/templates/mine/builds/b2/status", 404}, {h.key, "/templates/none/builds/b1/status", 404},
	} {
		if r := h.doKey(c.key, "GET", c.path, nil); r.status != c.want {
			t.Errorf("GET %s: %d %s, want %d", c.path, r.status, r.body, c.want)
		}
	}
	for key, want := range map[string]string{h.key: "[{[mine]} {[base]}]", other: "[{[theirs]} {[base]}]"} {
		for _, path := range []string{"/templates", "/v2/templates"} {
			var list []struct{ Names []string }
			h.doKey(key, "GET", path, nil).json(t, &list)
			if got := fmt.Sprint(list); got != want {
				t.Errorf("GET %s = %s, want %s", path, got, want)
			}
		}
	}
	if r := h.do("POST", "/v2/sandboxes", map[string]any{"templateID": "theirs"}); r.status != 404 {
		t.Errorf("create from another team's template: %d", r.status)
	}
	if r := h.do("DELETE", "/templates/base", nil); r.status != 403 {
		t.Errorf("delete a built-in: %d", r.status)
	}
}

// TestTemplateCatalogBuildLogs: the status of a build the template API has
// no record of (the operator's, or the team's own) comes from the catalog,
// at the level asked for.
func TestTemplateCatalogBuildLogs(t *testing.T) {
	h, _ := templateHarness(t, Config{})
	var st struct {
		Status string
		Logs   []string
	}
	h.do("GET", "/templates/base/builds/b1/status?level=error", nil).json(t, &st)
	if st.Status != "ready" || fmt.Sprint(st.Logs) != "[oops]" {
		t.Errorf("built-in status = %+v", st)
	}
	h.do("GET", "/templates/mine/builds/b1/status", nil).json(t, &st)
	if fmt.Sprint(st.Logs) != "[built mine oops]" {
		t.Errorf("own status = %+v", st)
	}
}

// TestCreateFromTemplateDefaults: a create passes the template's user,
// workdir, environment (under the create's envVars) and start command, and
// the egress settings when the operator gives them.
func TestCreateFromTemplateDefaults(t *testing.T) {
	h, _ := templateHarness(t, Config{Outbound: outbound.Settings{CABundle: "/host/ca.pem", ProxyEnv: map[string]string{"HTTPS_PROXY": "http://proxy:3128"}}})
	h.create(map[string]any{"templateID": "mine", "envVars": map[string]string{"B": "create"}})
	req := h.fake.lastCreate()
	init := req.Init
	if init.DefaultUser != "app" || init.DefaultWorkdir != "/srv" || init.EnvVars["A"] != "template" || init.EnvVars["B"] != "create" ||
		init.EnvVars["HTTPS_PROXY"] != "http://proxy:3128" || init.EnvVars["SSL_CERT_FILE"] == "" || req.CABundle != "/host/ca.pem" {
		t.Errorf("create request = %+v", req)
	}
	if req.Start == nil || req.Start.Cmd != "serve" || req.Start.ReadyCmd != "check" {
		t.Errorf("start = %+v", req.Start)
	}
}
