package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

type volumeInfo struct {
	VolumeID  string `json:"volumeID"`
	Name      string `json:"name"`
	Token     string `json:"token"`
	SizeBytes int64  `json:"sizeBytes"`
}

// content calls the volume content API with the volume's token and returns
// the status and body.
func (s *server) content(t *testing.T, v volumeInfo, method, op, query string, body io.Reader) (int, string) {
	t.Helper()
	code, data, err := s.VolumeContent(context.Background(), v.VolumeID, v.Token, method, op, query, body)
	if err != nil {
		t.Fatal(err)
	}
	return code, data
}

func TestVolumes(t *testing.T) { volumeFlow(t, startServer(t)) }

// TestVolumesGVisor: the same with sandboxes under gVisor.
func TestVolumesGVisor(t *testing.T) {
	runscBinary(t)
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbit", Args: []string{"--runtime", "runsc"}})
	volumeFlow(t, &server{Server: ts, t: t})
}

// volumeFlow: create (409 for a taken name), bad mount paths, a sandbox
// writes and fills the volume (ENOSPC there only), delete refused while
// mounted, the content API, a second sandbox reads, ownership as the
// sandboxes see it, symlink escapes through the content API, delete.
func volumeFlow(t *testing.T, s *server) {
	ctx := context.Background()
	var v volumeInfo
	if code := s.api("POST", "/volumes", map[string]any{"name": "data", "sizeMB": 32}, &v); code != 201 || v.Token == "" || v.SizeBytes != 32<<20 {
		t.Fatalf("create volume: %d %+v", code, v)
	}
	if code := s.api("POST", "/volumes", map[string]any{"name": "data"}, nil); code != http.StatusConflict {
		t.Fatalf("second volume of that name: %d, want 409", code)
	}
	for _, p := range []string{"relative", "/proc/x", "/", "/a/../b"} {
		body := map[string]any{"templateID": "base", "volumeMounts": []map[string]string{{"name": "data", "path": p}}}
		if code := s.api("POST", "/v2/sandboxes", body, nil); code != http.StatusBadRequest {
			t.Errorf("mount path %q: %d, want 400", p, code)
		}
	}
	mount := map[string]any{"volumeMounts": []map[string]string{{"name": "data", "path": "/mnt/data"}}}
	a := s.create(t, mount)
	a.mustRun(ctx, t, "echo from-a > /mnt/data/shared.txt && cat /mnt/data/shared.txt", "from-a\n")
	out, code := a.run(ctx, t, "head -c 48M /dev/zero > /mnt/data/big")
	if code == 0 || !strings.Contains(out, "No space left on device") {
		t.Fatalf("filling the volume: %d %q, want ENOSPC", code, out)
	}
	a.mustRun(ctx, t, "rm /mnt/data/big && echo rootfs-ok > /home/user/ok && cat /home/user/ok", "rootfs-ok\n")
	if code := s.api("DELETE", "/volumes/"+v.VolumeID, nil, nil); code != http.StatusConflict {
		t.Fatalf("delete a volume in use: %d, want 409", code)
	}

	checkContentAPI(t, s, v)
	b := s.create(t, mount)
	b.mustRun(ctx, t, "cat /mnt/data/shared.txt /mnt/data/api/hello.txt", "from-a\nhello from the API\n")
	a.mustRun(ctx, t, "cat /mnt/data/api/hello.txt", "hello from the API\n")
	// Ownership is the sandbox's view in both (idmapped mounts), whatever their host ranges.
	for _, sb := range []*sandbox{a, b} {
		sb.mustRun(ctx, t, "stat -c %U:%G /mnt/data/shared.txt /mnt/data/api/hello.txt", "user:user\nuser:user\n")
	}

	a.mustRun(ctx, t, "ln -s /etc /mnt/data/abs && ln -s ../../../../etc /mnt/data/rel", "")
	for _, p := range []string{"abs/passwd", "rel/passwd", "../../../etc/passwd"} {
		if code, body := s.content(t, v, "GET", "file", "path="+p, nil); code != http.StatusBadRequest {
			t.Errorf("read %s through the content API: %d %s, want 400", p, code, body)
		}
	}
	for _, sb := range []*sandbox{a, b} {
		s.api("DELETE", "/sandboxes/"+sb.ID, nil, nil)
	}
	if code := s.api("DELETE", "/volumes/"+v.VolumeID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("delete volume: %d", code)
	}
	if code := s.api("GET", "/volumes/"+v.VolumeID, nil, nil); code != http.StatusNotFound {
		t.Fatalf("deleted volume: %d, want 404", code)
	}
	if entries, _ := os.ReadDir(filepath.Join(s.DataDir, "volumes")); len(entries) != 0 {
		t.Fatalf("volume data left: %v", entries)
	}
}

// checkContentAPI writes, reads, lists, stats, changes and removes through
// the content API.
func checkContentAPI(t *testing.T, s *server, v volumeInfo) {
	t.Helper()
	if code, _ := s.content(t, volumeInfo{VolumeID: v.VolumeID, Token: "wrong"}, "GET", "path", "path=/", nil); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
	if code, body := s.content(t, v, "PUT", "file", "path=/api/hello.txt&force=true", strings.NewReader("hello from the API\n")); code != 201 {
		t.Fatalf("write: %d %s", code, body)
	}
	if code, body := s.content(t, v, "GET", "file", "path=/api/hello.txt", nil); code != 200 || body != "hello from the API\n" {
		t.Fatalf("read: %d %q", code, body)
	}
	code, body := s.content(t, v, "GET", "dir", "path=/&depth=2", nil)
	var entries []struct{ Path, Type string }
	if code != 200 || json.Unmarshal([]byte(body), &entries) != nil || len(entries) != 3 {
		t.Fatalf("list: %d %s", code, body)
	}
	if code, body := s.content(t, v, "PATCH", "path", "path=/api/hello.txt", strings.NewReader(`{"mode":384}`)); code != 200 || !strings.Contains(body, `"mode":384`) {
		t.Fatalf("chmod: %d %s", code, body)
	}
	if code, body := s.content(t, v, "PATCH", "path", "path=/api/hello.txt", strings.NewReader(`{"mode":420}`)); code != 200 {
		t.Fatalf("chmod back: %d %s", code, body)
	}
	if code, _ := s.content(t, v, "POST", "dir", "path=/api/tmp", nil); code != 201 {
		t.Fatalf("mkdir: %d", code)
	}
	if code, _ := s.content(t, v, "DELETE", "path", "path=/api/tmp", nil); code != 204 {
		t.Fatalf("remove: %d", code)
	}
	if code, _ := s.content(t, v, "GET", "path", "path=/api/tmp", nil); code != 404 {
		t.Fatalf("stat removed: %d", code)
	}
}
