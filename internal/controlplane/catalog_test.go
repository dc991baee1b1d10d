package controlplane

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/template"
)

// catalogSource is a TemplateSource of one template and its build logs.
type catalogSource struct {
	logs map[string][]template.BuildLogEntry // "<id>/<build>" -> lines
}

func (c catalogSource) Get(ref string) (template.Info, error) {
	return template.Info{}, fmt.Errorf("%s: %w", ref, template.ErrNotFound)
}

func (c catalogSource) List() ([]template.Info, error) {
	return []template.Info{{ID: "tplbase1", BuildID: "abc123abc123", Aliases: []string{"base", "b"},
		BuiltAt: time.Unix(1700000000, 0), SizeBytes: 42}}, nil
}

func (c catalogSource) BuildLog(id, build string) ([]template.BuildLogEntry, error) {
	lines, ok := c.logs[id+"/"+build]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", id, build, template.ErrNotFound)
	}
	return lines, nil
}

// resolverOnly hides the TemplateCatalog of a resolver (as the cluster
// mode's resolver has none).
type resolverOnly struct{ TemplateResolver }

func catalogServer(t *testing.T, tpl TemplateResolver) (*httptest.Server, string) {
	t.Helper()
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "cubby.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	svc, err := New(withTestDefaults(Config{DefaultMemoryMB: 768}), Deps{Store: st, Backend: newFakeBackend(), Templates: tpl})
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := svc.EnsureAPIKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return srv, key
}

func getJSON(t *testing.T, srv *httptest.Server, key, path string, out any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	req.Header.Set("X-API-KEY", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %d %s: %v", path, resp.StatusCode, body, err)
	}
	return resp.StatusCode
}

func TestListTemplatesAndBuildLogs(t *testing.T) {
	lines := []template.BuildLogEntry{
		{Time: time.Unix(1, 0), Level: "info", Message: "one"},
		{Time: time.Unix(2, 0), Level: "info", Message: "two"},
		{Time: time.Unix(3, 0), Level: "warn", Message: "three"},
	}
	srv, key := catalogServer(t, BuiltTemplates{Source: catalogSource{logs: map[string][]template.BuildLogEntry{"tplbase1/abc123abc123": lines}}})

	var list []map[string]any
	if code := getJSON(t, srv, key, "/templates", &list); code != 200 || len(list) != 1 {
		t.Fatalf("GET /templates = %d %v", code, list)
	}
	got := list[0]
	for k, want := range map[string]any{"templateID": "tplbase1", "buildID": "abc123abc123", "public": true,
		"buildStatus": "ready", "memoryMB": 768.0, "cpuCount": 2.0, "diskSizeMB": 1024.0, "sizeBytes": 42.0,
		"createdAt": "2023-11-14T22:13:20Z"} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if fmt.Sprint(got["aliases"]) != "[base b]" || fmt.Sprint(got["names"]) != "[base b]" {
		t.Errorf("aliases %v names %v", got["aliases"], got["names"])
	}

	var build struct {
		Status     string   `json:"status"`
		Logs       []string `json:"logs"`
		LogEntries []struct {
			Level   string    `json:"level"`
			Message string    `json:"message"`
			Time    time.Time `json:"timestamp"`
		} `json:"logEntries"`
	}
	if code := getJSON(t, srv, key, "/templates/tplbase1/builds/abc123abc123/status?logsOffset=1&limit=1", &build); code != 200 {
		t.Fatalf("build status = %d", code)
	}
	if build.Status != "ready" || fmt.Sprint(build.Logs) != "[two]" || len(build.LogEntries) != 1 ||
		!build.LogEntries[0].Time.Equal(time.Unix(2, 0)) {
		t.Fatalf("build = %+v", build)
	}
	if getJSON(t, srv, key, "/templates/tplbase1/builds/abc123abc123/status?logsOffset=9", &build); len(build.Logs) != 0 || build.Logs == nil {
		t.Fatalf("offset past the end: %+v", build)
	}

	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	for path, want := range map[string]int{
		"/templates/tplbase1/builds/nope/status":                       404,
		"/templates/tplbase1/builds/abc123abc123/status?logsOffset=-1": 400,
		"/templates/tplbase1/builds/abc123abc123/status?limit=x":       400,
	} {
		if code := getJSON(t, srv, key, path, &e); code != want || e.Code != want {
			t.Errorf("GET %s = %d %+v, want %d", path, code, e, want)
		}
	}
	if code := getJSON(t, srv, "wrong", "/templates", &e); code != 401 {
		t.Errorf("wrong key: %d", code)
	}

	plain, key2 := catalogServer(t, resolverOnly{harnessTemplates})
	if code := getJSON(t, plain, key2, "/templates", &e); code != 501 {
		t.Errorf("resolver without a catalog: %d %+v, want 501", code, e)
	}
}
