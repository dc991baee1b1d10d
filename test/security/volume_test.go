package security

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

type volume struct {
	ID    string `json:"volumeID"`
	Name  string `json:"name"`
	Token string `json:"token"`
}

// newVolume creates a volume with key.
func (s *server) newVolume(t *testing.T, key, name string) volume {
	t.Helper()
	resp, data, err := s.Call(context.Background(), key, "POST", "/volumes", map[string]any{"name": name, "sizeMB": 32})
	var v volume
	if err != nil || resp.StatusCode != http.StatusCreated || json.Unmarshal(data, &v) != nil {
		t.Fatalf("create volume: %v %d %s", err, statusOf(resp), data)
	}
	return v
}

// volumeContent calls the volume content API for volume id with token.
func (s *server) volumeContent(t *testing.T, id, token, method, op, path string, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	code, data, err := s.VolumeContent(context.Background(), id, token, method, op, "path="+url.QueryEscape(path), rd)
	if err != nil {
		t.Fatal(err)
	}
	return code, data
}

func (s *server) createWithVolume(t *testing.T, template, volumeName, path string) (*sdk.Sandbox, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	resp, data, err := s.Call(ctx, s.Key, "POST", "/v2/sandboxes", map[string]any{
		"templateID": template, "volumeMounts": []map[string]string{{"name": volumeName, "path": path}}})
	if err != nil || resp.StatusCode != http.StatusCreated {
		return nil, &httpStatusError{code: statusOf(resp), body: string(data)}
	}
	var out struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	sbx, err := sdk.Connect(ctx, out.SandboxID, &sdk.ConnectOptions{ConnectionOptions: s.conn("")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sbx.Kill(context.Background()) })
	return sbx, nil
}

type httpStatusError struct {
	code int
	body string
}

func (e *httpStatusError) Error() string { return e.body }

// TestVolumeContentEscapes: root in a sandbox plants symlinks in a mounted
// volume (absolute, relative, as a directory and as the last component) and
// the volume content API is then used through them: every read and write is
// refused with 400 and nothing on the host is read, created or changed.
func TestVolumeContentEscapes(t *testing.T) {
	s := startServer(t)
	v := s.newVolume(t, s.Key, "data")
	host := t.TempDir()
	secret := filepath.Join(host, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	sbx, err := s.createWithVolume(t, "base", "data", "/mnt/data")
	if err != nil {
		t.Fatal(err)
	}
	plant := "cd /mnt/data && ln -s " + host + " abs && ln -s ../../../../../../../../" + strings.TrimPrefix(host, "/") + " rel && ln -s " + secret + " file && ln -s " + filepath.Join(host, "new") + " dangling"
	if r := asRoot(t, sbx, plant); r.Code != 0 {
		t.Fatalf("plant symlinks: %+v", r)
	}
	for _, c := range []struct{ method, op, path, body string }{
		{"GET", "file", "abs/secret", ""},
		{"GET", "file", "rel/secret", ""},
		{"GET", "file", "file", ""},
		{"GET", "file", "../../../../../../../" + secret, ""},
		{"GET", "dir", "abs", ""},
		{"PUT", "file", "abs/planted", "x"},
		{"PUT", "file", "dangling", "x"},
		{"PUT", "file", "file", "overwritten"},
		{"POST", "dir", "abs/newdir", ""},
		{"PATCH", "path", "abs/secret", `{"mode":511}`},
		{"DELETE", "path", "abs/secret", ""},
	} {
		code, body := s.volumeContent(t, v.ID, v.Token, c.method, c.op, c.path, c.body)
		if code != http.StatusBadRequest || strings.Contains(body, "host secret") {
			t.Errorf("%s %s %q: %d %q, want 400", c.method, c.op, c.path, code, body)
		}
	}
	data, err := os.ReadFile(secret)
	fi, _ := os.Stat(secret)
	if err != nil || string(data) != "host secret" || fi.Mode().Perm() != 0o600 {
		t.Errorf("host file changed: %q %v %v", data, fi.Mode(), err)
	}
	for _, p := range []string{"planted", "new", "newdir"} {
		if _, err := os.Lstat(filepath.Join(host, p)); err == nil {
			t.Errorf("%s created on the host", p)
		}
	}
}

// TestVolumeOtherTeam: another team cannot see, read, delete or mount a
// team's volume (404 / not found as for a volume that does not exist), and a
// volume's token opens no other volume.
func TestVolumeOtherTeam(t *testing.T) {
	s := startServer(t)
	v := s.newVolume(t, s.Key, "private")
	other := s.teamKey(t, "other")
	w := s.newVolume(t, other, "theirs")
	for _, ref := range []string{v.ID, v.Name} {
		for _, m := range []string{"GET", "DELETE"} {
			if code, e, _ := s.call(t, other, m, "/volumes/"+ref, nil); code != http.StatusNotFound || e.Code != 404 {
				t.Errorf("%s /volumes/%s with another team's key: %d %+v", m, ref, code, e)
			}
		}
		body := map[string]any{"templateID": "base", "volumeMounts": []map[string]string{{"name": ref, "path": "/mnt/x"}}}
		if code, e, _ := s.call(t, other, "POST", "/v2/sandboxes", body); code == http.StatusCreated || !strings.Contains(e.Message, "not found") {
			t.Errorf("mount another team's volume %s: %d %+v", ref, code, e)
		}
	}
	resp, data, err := s.Call(context.Background(), other, "GET", "/volumes", nil)
	if err != nil || strings.Contains(string(data), v.ID) {
		t.Errorf("another team lists the volume: %d %s", statusOf(resp), data)
	}
	if code, _ := s.volumeContent(t, v.ID, w.Token, "GET", "path", "/", ""); code != http.StatusUnauthorized {
		t.Errorf("another volume's token on this volume: %d, want 401", code)
	}
	if code, _ := s.volumeContent(t, v.ID, v.Token, "GET", "path", "/", ""); code != http.StatusOK {
		t.Errorf("the volume's own token: %d", code)
	}
}

// TestVolumeMountThroughSymlink: a sandbox started from a snapshot whose
// /work is a symlink to a host directory mounts a volume at /work/vol; the
// mount lands inside the sandbox, never on the host.
func TestVolumeMountThroughSymlink(t *testing.T) {
	s := startServer(t)
	s.newVolume(t, s.Key, "data")
	host := t.TempDir()
	src := s.create(t, "base")
	if r := asRoot(t, src, "ln -s "+host+" /work"); r.Code != 0 {
		t.Fatalf("plant: %+v", r)
	}
	code, e, _ := s.call(t, s.Key, "POST", "/sandboxes/"+src.ID()+"/snapshots", map[string]any{"name": "linked"})
	if code != http.StatusCreated {
		t.Fatalf("snapshot: %d %+v", code, e)
	}
	sbx, err := s.createWithVolume(t, "linked", "data", "/work/vol")
	if err != nil {
		t.Fatalf("create: %v", err) // refusing would be safe, but runc resolves the path inside the rootfs
	}
	if r := asRoot(t, sbx, "echo inside > /work/vol/f && cat /work/vol/f"); r.Out != "inside\n" {
		t.Errorf("volume at /work/vol: %+v", r)
	}
	entries, _ := os.ReadDir(host)
	if len(entries) != 0 {
		t.Errorf("the volume mount reached the host: %v", entries)
	}
	s.healthy(t)
}
