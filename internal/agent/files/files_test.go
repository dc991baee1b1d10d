package files

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/agent/filesystem"
	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agentapi"
	pb "github.com/cubby-dev/cubby/internal/envdpb/filesystem"
	"github.com/cubby-dev/cubby/internal/envdpb/filesystem/filesystemconnect"
	"github.com/cubby-dev/cubby/internal/filesig"
)

// env is the /files handler (and the Filesystem service, for Stat) behind a
// real HTTP server.
type env struct {
	dir    string
	url    string
	client *http.Client // no transparent gzip
	fs     filesystemconnect.FilesystemClient
}

func newEnv(t *testing.T, token string) *env {
	t.Helper()
	dir := t.TempDir()
	s := settings.New()
	s.Apply(agentapi.InitRequest{DefaultUser: "root", DefaultWorkdir: dir, AccessToken: token})
	log := slog.New(slog.DiscardHandler)
	svc := filesystem.NewService(s, log)
	t.Cleanup(func() { svc.Close() })
	mux := http.NewServeMux()
	mux.Handle(filesystemconnect.NewFilesystemHandler(svc))
	mux.Handle("/files", NewHandler(s, log))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	return &env{dir: dir, url: srv.URL, client: client,
		fs: filesystemconnect.NewFilesystemClient(srv.Client(), srv.URL, connect.WithProtoJSON())}
}

// filesURL builds /files?… from key/value pairs.
func (e *env) filesURL(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return e.url + "/files?" + q.Encode()
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, body}
}

func (e *env) get(t *testing.T, u string, hdr ...string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.do(t, req)
}

func (e *env) post(t *testing.T, u, ctype string, body io.Reader, hdr ...string) reply {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, body)
	req.Header.Set("Content-Type", ctype)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.do(t, req)
}

// wantError checks a REST error reply: status, JSON content type and body code.
func wantError(t *testing.T, r reply, status int) {
	t.Helper()
	var body struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if r.status != status || r.header.Get("Content-Type") != "application/json; charset=utf-8" ||
		json.Unmarshal(r.body, &body) != nil || body.Code != status || body.Message == "" {
		t.Fatalf("reply %d %q %s, want error %d", r.status, r.header.Get("Content-Type"), r.body, status)
	}
}

// multipartBody encodes parts (filename → content) as the SDKs do, with
// Content-Disposition written by hand so filenames keep their directories.
func multipartBody(t *testing.T, files [][2]string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range files {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, f[0]))
		h.Set("Content-Type", "application/octet-stream")
		pw, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write([]byte(f[1]))
	}
	other, _ := mw.CreateFormField("ignored")
	other.Write([]byte("not a file"))
	mw.Close()
	return mw.FormDataContentType(), &buf
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUploadMultipartMultiFile(t *testing.T) {
	e := newEnv(t, "")
	a := filepath.Join(e.dir, "new", "deeper", "a.txt")
	b := filepath.Join(e.dir, "b.txt")
	ctype, body := multipartBody(t, [][2]string{{a, "alpha"}, {b, "beta"}})
	r := e.post(t, e.filesURL("username", "nobody"), ctype, body)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	want := fmt.Sprintf(`[{"name":"a.txt","path":%q,"type":"file"},{"name":"b.txt","path":%q,"type":"file"}]`, a, b)
	if string(r.body) != want {
		t.Fatalf("body %s, want %s", r.body, want)
	}
	if readFile(t, a) != "alpha" || readFile(t, b) != "beta" {
		t.Fatal("content mismatch")
	}
	for _, p := range []string{a, filepath.Dir(a), filepath.Dir(filepath.Dir(a))} {
		st, err := e.fs.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: p}))
		if err != nil {
			t.Fatal(err)
		}
		en := st.Msg.GetEntry()
		wantPerm := "drwxr-xr-x"
		if p == a {
			wantPerm = "-rw-r--r--"
		}
		if en.GetOwner() != "nobody" || en.GetGroup() != "nogroup" || en.GetPermissions() != wantPerm {
			t.Fatalf("%s: %v", p, en)
		}
	}
	// Nothing but the two files: no temporary file left behind.
	if ents, _ := os.ReadDir(filepath.Dir(a)); len(ents) != 1 {
		t.Fatalf("directory holds %v", ents)
	}
}

func TestUploadMultipartPathAndDuplicates(t *testing.T) {
	e := newEnv(t, "")
	dest := filepath.Join(e.dir, "q.txt")
	ctype, body := multipartBody(t, [][2]string{{"ignored-name.txt", "via query"}})
	r := e.post(t, e.filesURL("path", dest), ctype, body)
	if r.status != http.StatusOK || readFile(t, dest) != "via query" {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	dup := filepath.Join(e.dir, "dup.txt")
	ctype, body = multipartBody(t, [][2]string{{dup, "1"}, {dup, "2"}})
	wantError(t, e.post(t, e.filesURL(), ctype, body), http.StatusBadRequest)

	ctype, body = multipartBody(t, [][2]string{{e.dir, "onto a directory"}})
	wantError(t, e.post(t, e.filesURL(), ctype, body), http.StatusBadRequest)

	wantError(t, e.post(t, e.filesURL("path", dest), "text/plain", strings.NewReader("x")), http.StatusBadRequest)
	wantError(t, e.post(t, e.filesURL(), "application/octet-stream", strings.NewReader("x")), http.StatusBadRequest)
}

func TestUploadOctetStreamGzip(t *testing.T) {
	e := newEnv(t, "")
	dest := filepath.Join(e.dir, "z", "data.bin")
	payload := strings.Repeat("compress me ", 1000)
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(payload))
	zw.Close()
	r := e.post(t, e.filesURL("path", dest), "application/octet-stream", &zb, "Content-Encoding", "gzip")
	if r.status != http.StatusOK || readFile(t, dest) != payload {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	r = e.post(t, e.filesURL("path", dest), "application/octet-stream", strings.NewReader("not gzip"), "Content-Encoding", "gzip")
	wantError(t, r, http.StatusBadRequest)
	if readFile(t, dest) != payload {
		t.Fatal("failed upload changed the file")
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	e := newEnv(t, "")
	dest := filepath.Join(e.dir, "m.txt")
	r := e.post(t, e.filesURL("path", dest), "application/octet-stream", strings.NewReader("x"),
		"X-Metadata-Owner-Team", "Data Eng", "X-Metadata-Ver", "2")
	want := fmt.Sprintf(`[{"name":"m.txt","path":%q,"type":"file","metadata":{"owner-team":"Data Eng","ver":"2"}}]`, dest)
	if r.status != http.StatusOK || string(r.body) != want {
		t.Fatalf("status %d: %s, want %s", r.status, r.body, want)
	}
	stat := func() map[string]string {
		st, err := e.fs.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: dest}))
		if err != nil {
			t.Fatal(err)
		}
		return st.Msg.GetEntry().GetMetadata()
	}
	if md := stat(); len(md) != 2 || md["owner-team"] != "Data Eng" || md["ver"] != "2" {
		t.Fatalf("metadata = %v", md)
	}
	// Each upload replaces the metadata.
	r = e.post(t, e.filesURL("path", dest), "application/octet-stream", strings.NewReader("y"), "X-Metadata-Other", "o")
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if md := stat(); len(md) != 1 || md["other"] != "o" {
		t.Fatalf("metadata = %v", md)
	}
	r = e.post(t, e.filesURL("path", dest), "application/octet-stream", strings.NewReader("z"))
	if md := stat(); r.status != http.StatusOK || len(md) != 0 {
		t.Fatalf("metadata not cleared: %v", md)
	}
	for _, bad := range [][2]string{
		{"X-Metadata-K", "caf\u00e9"},
		{"X-Metadata-" + strings.Repeat("k", 247), "v"},
		{"X-Metadata-Big", strings.Repeat("v", 4097)},
	} {
		wantError(t, e.post(t, e.filesURL("path", dest), "application/octet-stream", strings.NewReader("x"), bad[0], bad[1]), http.StatusBadRequest)
	}
}

// gunzip returns the content of a gzip body.
func gunzip(t *testing.T, body []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	plain, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return string(plain)
}

// TestDownloadVirtualFiles reads procfs files, whose stat size is 0: their
// content comes back gzipped when the client accepts gzip (as from E2B's envd)
// and as read otherwise.
func TestDownloadVirtualFiles(t *testing.T) {
	e := newEnv(t, "")
	for _, p := range []string{"/proc/version", "/proc/sys/kernel/random/boot_id", "/proc/self/limits"} {
		want, err := os.ReadFile(p)
		if err != nil || len(want) == 0 {
			t.Fatalf("read %s: %v", p, err)
		}
		r := e.get(t, e.filesURL("path", p), "Accept-Encoding", "gzip")
		if r.status != http.StatusOK || r.header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("%s, gzip: %d %v %s", p, r.status, r.header, r.body)
		}
		if got := gunzip(t, r.body); len(got) == 0 || (p != "/proc/self/limits" && got != string(want)) {
			t.Errorf("%s, gzip: got %q, want %q", p, got, want)
		}
		r = e.get(t, e.filesURL("path", p))
		if r.status != http.StatusOK || len(r.body) == 0 || (p != "/proc/self/limits" && string(r.body) != string(want)) {
			t.Errorf("%s: %d %v %q, want %q", p, r.status, r.header, r.body, want)
		}
	}
}

func TestDownload(t *testing.T) {
	e := newEnv(t, "")
	f := filepath.Join(e.dir, "hello world.txt")
	content := strings.Repeat("hello ", 200)
	os.WriteFile(f, []byte(content), 0o644)
	empty := filepath.Join(e.dir, "empty")
	os.WriteFile(empty, nil, 0o644)

	r := e.get(t, e.filesURL("path", f))
	if r.status != http.StatusOK || string(r.body) != content ||
		r.header.Get("Content-Disposition") != `inline; filename="hello world.txt"` ||
		!strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") || r.header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("download: %d %v", r.status, r.header)
	}
	r = e.get(t, e.filesURL("path", f), "Accept-Encoding", "gzip, deflate")
	if r.status != http.StatusOK || r.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("gzip download: %d %v", r.status, r.header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.body))
	if err != nil {
		t.Fatal(err)
	}
	if plain, _ := io.ReadAll(zr); string(plain) != content {
		t.Fatal("gunzipped content mismatch")
	}
	r = e.get(t, e.filesURL("path", empty))
	if r.status != http.StatusOK || r.header.Get("Content-Length") != "0" || len(r.body) != 0 {
		t.Fatalf("empty file: %d %v %q", r.status, r.header, r.body)
	}
	r = e.get(t, e.filesURL("path", empty), "Accept-Encoding", "gzip, deflate")
	if r.status != http.StatusOK || r.header.Get("Content-Encoding") != "gzip" || gunzip(t, r.body) != "" {
		t.Fatalf("empty file, gzip: %d %v %q", r.status, r.header, r.body)
	}
	r = e.get(t, e.filesURL("path", f), "Range", "bytes=0-4")
	if r.status != http.StatusPartialContent || string(r.body) != "hello" {
		t.Fatalf("range: %d %q", r.status, r.body)
	}
	wantError(t, e.get(t, e.filesURL("path", f), "Accept-Encoding", "identity;q=0"), http.StatusNotAcceptable)
	wantError(t, e.get(t, e.filesURL("path", filepath.Join(e.dir, "missing"))), http.StatusNotFound)
	wantError(t, e.get(t, e.filesURL("path", e.dir)), http.StatusBadRequest)
	r = e.get(t, e.filesURL("path", f, "username", "nosuchuser"))
	wantError(t, r, http.StatusUnauthorized)
	if !strings.Contains(string(r.body), "invalid username: 'nosuchuser'") {
		t.Fatalf("body %s", r.body)
	}
	// A relative path resolves against the user's home; "" against the workdir.
	wantError(t, e.get(t, e.filesURL()), http.StatusBadRequest)
}

func TestSignatures(t *testing.T) {
	const token = "secret-token"
	e := newEnv(t, token)
	f := filepath.Join(e.dir, "s.txt")
	os.WriteFile(f, []byte("signed"), 0o644)
	future := time.Now().Add(time.Hour).Unix()
	past := time.Now().Add(-time.Hour).Unix()
	exp := func(v int64) string { return fmt.Sprint(v) }

	if r := e.get(t, e.filesURL("path", f)); r.status != http.StatusUnauthorized {
		t.Fatalf("unauthenticated read: %d", r.status)
	}
	if r := e.get(t, e.filesURL("path", f), "X-Access-Token", token); r.status != http.StatusOK {
		t.Fatalf("token read: %d %s", r.status, r.body)
	}
	wantError(t, e.get(t, e.filesURL("path", f, "signature", filesig.Sign(f, "read", "", token, 0)), "X-Access-Token", "wrong"), http.StatusUnauthorized)
	if r := e.get(t, e.filesURL("path", f, "signature", filesig.Sign(f, "read", "", token, 0))); r.status != http.StatusOK || string(r.body) != "signed" {
		t.Fatalf("signed read: %d %s", r.status, r.body)
	}
	sig := filesig.Sign(f, "read", "root", token, future)
	if r := e.get(t, e.filesURL("path", f, "username", "root", "signature", sig, "signature_expiration", exp(future))); r.status != http.StatusOK {
		t.Fatalf("signed read with expiration: %d %s", r.status, r.body)
	}
	exact := func(r reply, body string) {
		t.Helper()
		if r.status != http.StatusUnauthorized || string(r.body) != body || r.header.Get("Content-Type") != "application/json; charset=utf-8" {
			t.Fatalf("reply %d %s, want 401 %s", r.status, r.body, body)
		}
	}
	exact(e.get(t, e.filesURL("path", f, "signature", filesig.Sign(f, "write", "", token, 0))), `{"code":401,"message":"invalid signature"}`)
	exact(e.get(t, e.filesURL("path", f, "signature", "v1_bogus")), `{"code":401,"message":"invalid signature"}`)
	sig = filesig.Sign(f, "read", "", token, past)
	exact(e.get(t, e.filesURL("path", f, "signature", sig, "signature_expiration", exp(past))), `{"code":401,"message":"signature is already expired"}`)

	dest := filepath.Join(e.dir, "up.txt")
	sig = filesig.Sign(dest, "write", "", token, future)
	r := e.post(t, e.filesURL("path", dest, "signature", sig, "signature_expiration", exp(future)), "application/octet-stream", strings.NewReader("up"))
	if r.status != http.StatusOK || readFile(t, dest) != "up" {
		t.Fatalf("signed write: %d %s", r.status, r.body)
	}
	sig = filesig.Sign(dest, "read", "", token, future) // a read signature does not allow writes
	exact(e.post(t, e.filesURL("path", dest, "signature", sig, "signature_expiration", exp(future)), "application/octet-stream", strings.NewReader("x")),
		`{"code":401,"message":"invalid signature"}`)
}

func TestUnsecuredAcceptsAnything(t *testing.T) {
	e := newEnv(t, "")
	f := filepath.Join(e.dir, "u.txt")
	os.WriteFile(f, []byte("open"), 0o644)
	if r := e.get(t, e.filesURL("path", f, "signature", "v1_bogus"), "X-Access-Token", "whatever"); r.status != http.StatusOK {
		t.Fatalf("unsecured read: %d %s", r.status, r.body)
	}
}

func TestDispositionParams(t *testing.T) {
	cases := []struct {
		in   string
		want map[string]string
	}{
		{`form-data; name="file"; filename="/home/user/dir/a.txt"`, map[string]string{"name": "file", "filename": "/home/user/dir/a.txt"}},
		{`form-data; name=file; filename=rel/b.txt`, map[string]string{"name": "file", "filename": "rel/b.txt"}},
		{`form-data; name="file"; filename="a %22q%22.txt"`, map[string]string{"name": "file", "filename": `a "q".txt`}},
		{`form-data; name="file"; filename="a\"b\\c\d"`, map[string]string{"name": "file", "filename": `a"b\c\d`}},
		{`form-data; name="file"; filename="x"; filename*=UTF-8''%C3%A9t%C3%A9.txt`, map[string]string{"name": "file", "filename": "été.txt"}},
		{`form-data; name="file"; filename="semi;colon.txt"`, map[string]string{"name": "file", "filename": "semi;colon.txt"}},
	}
	for _, c := range cases {
		got := dispositionParams(c.in)
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("dispositionParams(%s) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestNegotiate(t *testing.T) {
	cases := []struct {
		header string
		enc    string
		ok     bool
	}{
		{"", "identity", true},
		{"gzip, deflate", "gzip", true},
		{"br;q=1, gzip;q=0.5", "gzip", true},
		{"gzip;q=0", "identity", true},
		{"identity;q=0", "", false},
		{"*;q=0", "", false},
		{"*", "gzip", true},
	}
	for _, c := range cases {
		if enc, ok := negotiate(c.header, true); enc != c.enc || ok != c.ok {
			t.Errorf("negotiate(%q) = %q %v, want %q %v", c.header, enc, ok, c.enc, c.ok)
		}
	}
}

// TestUploadWatchEvents checks that a watcher sees an upload as E2B's envd
// reports it: exactly CREATE, CHMOD, WRITE for a new file and CHMOD, WRITE over
// an existing one, never the temporary.
func TestUploadWatchEvents(t *testing.T) {
	e := newEnv(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stream, err := e.fs.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: e.dir, Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start: %v", stream.Err())
	}
	// events returns the events up to and including the WRITE of last.
	events := func(last string) []string {
		t.Helper()
		var got []string
		for {
			if !stream.Receive() {
				t.Fatalf("stream ended after %v: %v", got, stream.Err())
			}
			ev := stream.Msg().GetFilesystem()
			if ev == nil {
				continue
			}
			if strings.Contains(ev.GetName(), ".cubby-upload") {
				t.Fatalf("temporary file reported: %v", ev)
			}
			got = append(got, ev.GetType().String()+" "+ev.GetName())
			if got[len(got)-1] == "EVENT_TYPE_WRITE "+last {
				return got
			}
		}
	}
	if err := os.Mkdir(filepath.Join(e.dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetFilesystem().GetName() != "sub" {
		t.Fatalf("no CREATE sub: %v %v", stream.Msg(), stream.Err())
	}
	dest := filepath.Join(e.dir, "sub", "w.txt")
	for _, want := range [][]string{
		{"EVENT_TYPE_CREATE sub/w.txt", "EVENT_TYPE_CHMOD sub/w.txt", "EVENT_TYPE_WRITE sub/w.txt"},
		{"EVENT_TYPE_CHMOD sub/w.txt", "EVENT_TYPE_WRITE sub/w.txt"},
	} {
		if r := e.post(t, e.filesURL("path", dest), "application/octet-stream", strings.NewReader("data")); r.status != http.StatusOK {
			t.Fatalf("upload: %d %s", r.status, r.body)
		}
		if got := events("sub/w.txt"); !slices.Equal(got, want) {
			t.Errorf("upload events = %v, want %v", got, want)
		}
	}
}
