package security

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// forkOf forks src with key through the control plane and connects to every
// fork (killed when the test ends); it fails the test unless all n started.
func (s *server) forkOf(t *testing.T, key, id string, n int) []*sdk.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, data, err := s.Call(ctx, key, "POST", "/sandboxes/"+id+"/fork", map[string]any{"count": n, "timeout": 120})
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("fork %s: %v %d %s", id, err, statusOf(resp), data)
	}
	var res []struct {
		Sandbox *struct {
			SandboxID string `json:"sandboxID"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(data, &res); err != nil || len(res) != n {
		t.Fatalf("fork %s: %v %s", id, err, data)
	}
	var out []*sdk.Sandbox
	for _, r := range res {
		if r.Sandbox == nil {
			t.Fatalf("fork %s failed: %s", id, data)
		}
		f, err := sdk.Connect(ctx, r.Sandbox.SandboxID, &sdk.ConnectOptions{ConnectionOptions: s.conn(key)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Kill(context.Background()) })
		out = append(out, f)
	}
	return out
}

func statusOf(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// envdStatus reads /etc/hostname from sandbox id's envd through the gateway
// presenting token, as anyone holding a leaked token could, and returns the
// status.
func (s *server) envdStatus(t *testing.T, id, token string) int {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+s.Addr+"/files?path=/etc/hostname&username=root", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", "49983")
	req.Header.Set("X-Access-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestForkNewCredentials: a fork is a new sandbox with credentials of its
// own. Root in a fork finds nothing of the source's access token on its disk
// (the agent's state is not captured; env vars are inherited), the source's token does
// not open the fork and the fork's does not open the source or a sibling.
func TestForkNewCredentials(t *testing.T) {
	s := startServer(t)
	src := s.createWith(t, &sdk.CreateOptions{Envs: map[string]string{"SOURCE_SECRET": "s3cr3t-" + s.Key[4:12]}})
	asRoot(t, src, "echo data > /root/kept")
	forks := s.forkOf(t, s.Key, src.ID(), 2)
	for i, f := range forks {
		if f.AccessToken() == "" || f.AccessToken() == src.AccessToken() {
			t.Fatalf("fork %d access token %q, source's %q", i, f.AccessToken(), src.AccessToken())
		}
		if r := asRoot(t, f, "cat /root/kept"); r.Out != "data\n" {
			t.Fatalf("fork %d lacks the source's files: %+v", i, r)
		}
		// Env vars are inherited by design (E2B's fork); the token is not.
		leak := asRoot(t, f, fmt.Sprintf("grep -rlsF -e %q /run /root /home /tmp /etc /var 2>/dev/null; echo $SOURCE_SECRET", src.AccessToken()))
		if strings.TrimSpace(leak.Out) != "s3cr3t-"+s.Key[4:12] {
			t.Errorf("fork %d: the source's access token is on its disk: %q", i, leak.Out)
		}
		if code := s.envdStatus(t, f.ID(), src.AccessToken()); code != http.StatusUnauthorized {
			t.Errorf("the source's token opens fork %d: %d", i, code)
		}
		if code := s.envdStatus(t, f.ID(), f.AccessToken()); code != http.StatusOK {
			t.Errorf("fork %d's own token: %d", i, code)
		}
	}
	if code := s.envdStatus(t, src.ID(), forks[0].AccessToken()); code != http.StatusUnauthorized {
		t.Errorf("a fork's token opens the source: %d", code)
	}
	if code := s.envdStatus(t, forks[1].ID(), forks[0].AccessToken()); code != http.StatusUnauthorized {
		t.Errorf("a fork's token opens its sibling: %d", code)
	}
}

// TestSnapshotOtherTeam: another team's key cannot snapshot or fork a
// sandbox, see, use or delete a snapshot of the owning team: 404 as for
// what does not exist; the snapshot stays usable by its team.
func TestSnapshotOtherTeam(t *testing.T) {
	s := startServer(t)
	src := s.create(t, "base")
	other := s.teamKey(t, "other")
	code, body, _ := s.call(t, s.Key, "POST", "/sandboxes/"+src.ID()+"/snapshots", map[string]any{"name": "mine"})
	if code != http.StatusCreated {
		t.Fatalf("snapshot: %d %+v", code, body)
	}
	var snaps []struct {
		SnapshotID string `json:"snapshotID"`
	}
	resp, data, err := s.Call(context.Background(), s.Key, "GET", "/snapshots", nil)
	if err != nil || json.Unmarshal(data, &snaps) != nil || len(snaps) != 1 {
		t.Fatalf("list: %v %d %s", err, statusOf(resp), data)
	}
	ref := snaps[0].SnapshotID
	for _, rt := range []struct{ method, path string }{
		{"POST", "/sandboxes/" + src.ID() + "/snapshots"},
		{"POST", "/sandboxes/" + src.ID() + "/fork"},
		{"GET", "/snapshots/" + url.PathEscape(ref)},
		{"DELETE", "/templates/" + url.PathEscape(ref)},
	} {
		if code, e, _ := s.call(t, other, rt.method, rt.path, map[string]any{}); code != http.StatusNotFound || e.Code != 404 {
			t.Errorf("%s %s with another team's key: %d %+v, want 404", rt.method, rt.path, code, e)
		}
	}
	for _, r := range []string{ref, strings.TrimPrefix(ref, "default/"), "mine"} {
		if code, e, _ := s.call(t, other, "POST", "/v2/sandboxes", map[string]any{"templateID": r}); code != http.StatusNotFound {
			t.Errorf("create from another team's snapshot %q: %d %+v, want 404", r, code, e)
		}
	}
	resp, data, err = s.Call(context.Background(), other, "GET", "/snapshots", nil)
	if err != nil || strings.TrimSpace(string(data)) != "[]" {
		t.Errorf("another team lists: %v %d %s", err, statusOf(resp), data)
	}
	kid := s.createWith(t, &sdk.CreateOptions{Template: ref})
	if r := asRoot(t, kid, "hostname"); r.Out != kid.ID()+"\n" {
		t.Errorf("sandbox from the team's own snapshot: %+v", r)
	}
}

// TestSnapshotScrubStaysInside: root in a sandbox replaces /run with a
// symlink to a host directory before a snapshot; removing the agent's state
// from the capture must not follow it onto the host.
func TestSnapshotScrubStaysInside(t *testing.T) {
	s := startServer(t)
	canary := filepath.Join(t.TempDir(), "canary")
	if err := os.MkdirAll(filepath.Join(canary, "cubby"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(canary, "cubby", "keep"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := s.create(t, "base")
	if r := asRoot(t, src, "mv /run /run.old && ln -s "+canary+" /run && ls -ld /run"); r.Code != 0 {
		t.Fatalf("plant symlink: %+v", r)
	}
	code, e, _ := s.call(t, s.Key, "POST", "/sandboxes/"+src.ID()+"/snapshots", nil)
	if code != http.StatusCreated {
		t.Fatalf("snapshot: %d %+v", code, e)
	}
	if data, err := os.ReadFile(filepath.Join(canary, "cubby", "keep")); err != nil || string(data) != "host" {
		t.Errorf("host file below the planted symlink: %q %v", data, err)
	}
	s.healthy(t)
}
