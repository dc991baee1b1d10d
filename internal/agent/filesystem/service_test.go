package filesystem

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agentapi"
	pb "github.com/cubby-dev/cubby/internal/envdpb/filesystem"
	"github.com/cubby-dev/cubby/internal/envdpb/filesystem/filesystemconnect"
)

// env is a Filesystem service behind a real HTTP server, with a JSON and a
// binary Connect client.
type env struct {
	dir  string // a fresh directory, the sandbox's workdir
	url  string
	svc  *Service
	json filesystemconnect.FilesystemClient
	bin  filesystemconnect.FilesystemClient
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	s := settings.New()
	s.Apply(agentapi.InitRequest{DefaultUser: "root", DefaultWorkdir: dir})
	svc := NewService(s, slog.New(slog.DiscardHandler))
	mux := http.NewServeMux()
	mux.Handle(filesystemconnect.NewFilesystemHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { svc.Close() })
	return &env{
		dir:  dir,
		url:  srv.URL,
		svc:  svc,
		json: filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON()),
		bin:  filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL),
	}
}

// clients returns both codecs by name.
func (e *env) clients() map[string]filesystemconnect.FilesystemClient {
	return map[string]filesystemconnect.FilesystemClient{"json": e.json, "binary": e.bin}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func asUser[T any](msg *T, user string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
	return req
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("error = %v, want code %v", err, code)
	}
}

func TestStat(t *testing.T) {
	e := newEnv(t)
	f := filepath.Join(e.dir, "a.txt")
	mustWrite(t, f, "hello")
	if err := unix.Setxattr(f, "user.e2b.k", []byte("v"), 0); err != nil {
		t.Fatalf("setxattr: %v", err)
	}
	link := filepath.Join(e.dir, "link")
	if err := os.Symlink("a.txt", link); err != nil {
		t.Fatal(err)
	}
	for name, c := range e.clients() {
		t.Run(name, func(t *testing.T) {
			res, err := c.Stat(ctxT(t), connect.NewRequest(&pb.StatRequest{Path: f}))
			if err != nil {
				t.Fatal(err)
			}
			en := res.Msg.GetEntry()
			if en.GetName() != "a.txt" || en.GetPath() != f || en.GetType() != pb.FileType_FILE_TYPE_FILE ||
				en.GetSize() != 5 || en.GetMode() != 0o644 || en.GetPermissions() != "-rw-r--r--" ||
				en.GetOwner() != "root" || en.GetGroup() != "root" || en.SymlinkTarget != nil ||
				en.GetMetadata()["k"] != "v" || en.GetModifiedTime().AsTime().IsZero() {
				t.Fatalf("entry = %v", en)
			}
			res, err = c.Stat(ctxT(t), connect.NewRequest(&pb.StatRequest{Path: link}))
			if err != nil {
				t.Fatal(err)
			}
			en = res.Msg.GetEntry()
			if en.GetType() != pb.FileType_FILE_TYPE_FILE || en.GetSymlinkTarget() != f ||
				en.GetPermissions() != "Lrwxrwxrwx" || en.GetMode() != 0o644 {
				t.Fatalf("symlink entry = %v", en)
			}
			// "" is the workdir.
			res, err = c.Stat(ctxT(t), connect.NewRequest(&pb.StatRequest{}))
			if err != nil {
				t.Fatal(err)
			}
			if en := res.Msg.GetEntry(); en.GetPath() != e.dir || en.GetPermissions()[0] != 'd' {
				t.Fatalf("workdir entry = %v", en)
			}
			_, err = c.Stat(ctxT(t), connect.NewRequest(&pb.StatRequest{Path: filepath.Join(e.dir, "missing")}))
			wantCode(t, err, connect.CodeNotFound)
			_, err = c.Stat(ctxT(t), connect.NewRequest(&pb.StatRequest{Path: filepath.Join(f, "below")}))
			wantCode(t, err, connect.CodeNotFound)
		})
	}
}

func TestUnknownUser(t *testing.T) {
	e := newEnv(t)
	for name, c := range e.clients() {
		t.Run(name, func(t *testing.T) {
			_, err := c.Stat(ctxT(t), asUser(&pb.StatRequest{Path: e.dir}, "nosuchuser"))
			wantCode(t, err, connect.CodeUnauthenticated)
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Message() != "invalid username: 'nosuchuser'" {
				t.Fatalf("error = %v", err)
			}
		})
	}
}

// TestUnaryErrorWire checks the raw Connect error body: a string code.
func TestUnaryErrorWire(t *testing.T) {
	e := newEnv(t)
	body := `{"path":"` + filepath.Join(e.dir, "missing") + `"}`
	req, _ := http.NewRequest(http.MethodPost, e.url+"/filesystem.Filesystem/Stat", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("body %q: %v", raw, err)
	}
	if resp.StatusCode != http.StatusNotFound || got["code"] != "not_found" ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("status %d body %s", resp.StatusCode, raw)
	}
}

func TestListDir(t *testing.T) {
	e := newEnv(t)
	root := filepath.Join(e.dir, "tree")
	mustWrite(t, filepath.Join(root, "file1.txt"), "1")
	mustWrite(t, filepath.Join(root, "subdir1", "subdir1_1", "deep.txt"), "d")
	mustWrite(t, filepath.Join(root, "subdir1", "subdir1_2", "x.txt"), "x")
	mustWrite(t, filepath.Join(root, "subdir2", "y.txt"), "y")
	mustWrite(t, filepath.Join(root, "Z.txt"), "z") // uppercase sorts first
	link := filepath.Join(e.dir, "treelink")
	if err := os.Symlink(root, link); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path  string
		depth uint32
		want  []string
	}{
		{root, 0, []string{"Z.txt", "file1.txt", "subdir1", "subdir2"}},
		{root, 2, []string{"Z.txt", "file1.txt", "subdir1", "subdir1/subdir1_1", "subdir1/subdir1_2", "subdir2", "subdir2/y.txt"}},
		{link, 3, []string{"Z.txt", "file1.txt", "subdir1", "subdir1/subdir1_1", "subdir1/subdir1_1/deep.txt",
			"subdir1/subdir1_2", "subdir1/subdir1_2/x.txt", "subdir2", "subdir2/y.txt"}},
	}
	for name, c := range e.clients() {
		for _, tc := range cases {
			res, err := c.ListDir(ctxT(t), connect.NewRequest(&pb.ListDirRequest{Path: tc.path, Depth: tc.depth}))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var got []string
			for _, en := range res.Msg.GetEntries() {
				got = append(got, strings.TrimPrefix(en.GetPath(), tc.path+"/"))
				if en.GetName() != filepath.Base(en.GetPath()) {
					t.Fatalf("%s: name %q of %q", name, en.GetName(), en.GetPath())
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("%s: ListDir(%s, %d) = %v, want %v", name, tc.path, tc.depth, got, tc.want)
			}
		}
		_, err := c.ListDir(ctxT(t), connect.NewRequest(&pb.ListDirRequest{Path: filepath.Join(e.dir, "nope")}))
		wantCode(t, err, connect.CodeNotFound)
		_, err = c.ListDir(ctxT(t), connect.NewRequest(&pb.ListDirRequest{Path: filepath.Join(root, "file1.txt")}))
		wantCode(t, err, connect.CodeInvalidArgument)
	}
}

func TestMakeDirMoveRemove(t *testing.T) {
	e := newEnv(t)
	for name, c := range e.clients() {
		t.Run(name, func(t *testing.T) {
			base := filepath.Join(e.dir, name)
			p := filepath.Join(base, "a", "b")
			res, err := c.MakeDir(ctxT(t), asUser(&pb.MakeDirRequest{Path: p}, "nobody"))
			if err != nil {
				t.Fatal(err)
			}
			if en := res.Msg.GetEntry(); en.GetPath() != p || en.GetType() != pb.FileType_FILE_TYPE_DIRECTORY ||
				en.GetOwner() != "nobody" || en.GetGroup() != "nogroup" || en.GetPermissions() != "drwxr-xr-x" {
				t.Fatalf("entry = %v", en)
			}
			st, err := c.Stat(ctxT(t), connect.NewRequest(&pb.StatRequest{Path: base}))
			if err != nil || st.Msg.GetEntry().GetOwner() != "nobody" {
				t.Fatalf("created parent: %v %v", st, err)
			}
			_, err = c.MakeDir(ctxT(t), connect.NewRequest(&pb.MakeDirRequest{Path: p}))
			wantCode(t, err, connect.CodeAlreadyExists)
			f := filepath.Join(base, "f.txt")
			mustWrite(t, f, "x")
			_, err = c.MakeDir(ctxT(t), connect.NewRequest(&pb.MakeDirRequest{Path: f}))
			wantCode(t, err, connect.CodeInvalidArgument)
			_, err = c.MakeDir(ctxT(t), connect.NewRequest(&pb.MakeDirRequest{Path: filepath.Join(f, "sub")}))
			wantCode(t, err, connect.CodeInvalidArgument)

			dst := filepath.Join(base, "moved", "g.txt")
			mv, err := c.Move(ctxT(t), connect.NewRequest(&pb.MoveRequest{Source: f, Destination: dst}))
			if err != nil {
				t.Fatal(err)
			}
			if en := mv.Msg.GetEntry(); en.GetPath() != dst || en.GetName() != "g.txt" || en.GetSize() != 1 {
				t.Fatalf("move entry = %v", en)
			}
			if _, err := os.Stat(f); !os.IsNotExist(err) {
				t.Fatalf("source still there: %v", err)
			}
			_, err = c.Move(ctxT(t), connect.NewRequest(&pb.MoveRequest{Source: f, Destination: dst}))
			wantCode(t, err, connect.CodeNotFound)

			if _, err := c.Remove(ctxT(t), connect.NewRequest(&pb.RemoveRequest{Path: base})); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(base); !os.IsNotExist(err) {
				t.Fatalf("not removed: %v", err)
			}
			if _, err := c.Remove(ctxT(t), connect.NewRequest(&pb.RemoveRequest{Path: base})); err != nil {
				t.Fatalf("remove missing: %v", err)
			}
			mustWrite(t, f, "x")
			if _, err := c.Remove(ctxT(t), connect.NewRequest(&pb.RemoveRequest{Path: filepath.Join(f, "below")})); err != nil {
				t.Fatalf("remove below a file: %v", err)
			}
		})
	}
}

// TestStreamErrorWire checks the raw Connect streaming error: HTTP 200 and the
// error in the end-stream envelope; snake_case request fields are accepted.
func TestStreamErrorWire(t *testing.T) {
	e := newEnv(t)
	msg := []byte(`{"path":"` + filepath.Join(e.dir, "missing") + `","include_entry":true}`)
	body := append([]byte{0, 0, 0, 0, byte(len(msg))}, msg...)
	req, _ := http.NewRequest(http.MethodPost, e.url+"/filesystem.Filesystem/WatchDir", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || len(raw) < 5 || raw[0] != 2 {
		t.Fatalf("status %d body %q", resp.StatusCode, raw)
	}
	var end struct {
		Error struct{ Code string } `json:"error"`
	}
	if err := json.Unmarshal(raw[5:], &end); err != nil || end.Error.Code != "not_found" {
		t.Fatalf("end envelope %q: %v", raw[5:], err)
	}
}
