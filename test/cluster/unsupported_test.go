package cluster

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/testenv/testkube"
)

// TestUnsupportedAnswer501: what the kubernetes backend cannot do answers
// 501 in E2B's error shape ({"code": 501, "message": …}) saying what is not
// supported, and leaves nothing behind: snapshots, forks, volumes (created,
// mounted at create), the template build API.
func TestUnsupportedAnswer501(t *testing.T) {
	c := clusterOf(t, testkube.TierSimulated)
	f := newFleet(t, c, 1, simImages, unlimited...)
	c.ServeStandIns(t, f.ns)
	r := f.replicas[0]
	id, status, msg := f.create(r, "base", 600)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, msg)
	}
	cases := []struct {
		method, path string
		body         any
		says         string
	}{
		{http.MethodPost, "/sandboxes/" + id + "/snapshots", map[string]any{"name": "nightly"}, "snapshots"},
		{http.MethodPost, "/sandboxes/" + id + "/fork", map[string]any{}, "snapshots and forks"},
		{http.MethodPost, "/volumes", map[string]any{"name": "data"}, "volumes"},
		{http.MethodPost, "/v2/sandboxes", map[string]any{"templateID": "base",
			"volumeMounts": []map[string]string{{"name": "data", "path": "/mnt/data"}}}, "volumes"},
		{http.MethodPost, "/v3/templates", map[string]any{"name": "mine", "cpuCount": 1, "memoryMB": 512}, "templates from code"},
		{http.MethodGet, "/templates/aliases/base", nil, "template API"},
	}
	for _, tc := range cases {
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		status := f.call(r, tc.method, tc.path, tc.body, &e)
		if status != http.StatusNotImplemented || e.Code != http.StatusNotImplemented || !strings.Contains(e.Message, tc.says) {
			t.Errorf("%s %s: %d %+v; want 501 with code 501 and a message about %s", tc.method, tc.path, status, e, tc.says)
		}
	}
	var snaps []map[string]any
	if status := f.call(r, http.MethodGet, "/snapshots", nil, &snaps); status != http.StatusOK || len(snaps) != 0 {
		t.Errorf("snapshots listed after the refusals: %d %v", status, snaps)
	}
	var vols []map[string]any
	if status := f.call(r, http.MethodGet, "/volumes", nil, &vols); status != http.StatusOK || len(vols) != 0 {
		t.Errorf("volumes listed after the refusals: %d %v", status, vols)
	}
	var list []sandbox
	if status := f.call(r, http.MethodGet, "/v2/sandboxes", nil, &list); status != http.StatusOK || len(list) != 1 {
		t.Errorf("sandboxes after the refusals: %d %v; want only %s", status, list, id)
	}
}
