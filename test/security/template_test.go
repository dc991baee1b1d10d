package security

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/layer"
	"github.com/cubby-dev/cubby/internal/template"
	"github.com/cubby-dev/cubby/internal/testenv/testregistry"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
	"github.com/cubby-dev/cubby/sdk"
)

func buildCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// mustBuild builds name from body with the server's key and fails the test
// unless the build ends with want ("ready" or "error").
func (s *server) mustBuild(t *testing.T, name string, body map[string]any, want string) testserver.BuildResult {
	t.Helper()
	_, res, err := s.Build(buildCtx(t), name, body)
	if err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, s.Log())
	}
	if res.Status != want {
		t.Fatalf("build %s: status %s (%s), want %s\n%s", name, res.Status, res.Reason, want, res.LogText())
	}
	return res
}

// isolationProbe prints, as key=value lines, what a process running as root
// can do: its capabilities, seccomp and no_new_privs, whether it may create
// namespaces or mounts, who PID 1 is, its devices, and whether it reaches a
// port of the host (hostPort on the bridge gateway) and of another sandbox.
const isolationProbe = `
gw=$(ip route | awk '/^default/ {print $3}')
p() { echo "$1=$2"; }
p caps "$(grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status | tr -s '\t ' ' ' | tr '\n' ';')"
p seccomp "$(grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr -s '\t ' ' ' | tr '\n' ';')"
p unshare "$(unshare -U -r true >/dev/null 2>&1 && echo allowed || echo refused)"
p unshare-net "$(unshare -n true >/dev/null 2>&1 && echo allowed || echo refused)"
p mount "$(mount -t tmpfs none /mnt >/dev/null 2>&1 && echo allowed || echo refused)"
p pid1 "$(tr '\0' ' ' < /proc/1/cmdline | awk '{print $1, $2}')"
p devices "$(ls /dev | sort | tr '\n' ' ')"
p uid_map "$(tr -s ' ' < /proc/self/uid_map)"
p host "$(timeout 3 bash -c "echo > /dev/tcp/$gw/%d" >/dev/null 2>&1 && echo reachable || echo blocked)"
p neighbour "$(timeout 3 bash -c "echo > /dev/tcp/%s/8000" >/dev/null 2>&1 && echo reachable || echo blocked)"
p internet "$(timeout 20 bash -c 'exec 3<>/dev/tcp/deb.debian.org/80 && printf "HEAD / HTTP/1.0\r\nHost: deb.debian.org\r\n\r\n" >&3 && head -c 4 <&3' 2>/dev/null)"
`

// hostIDs returns probe output with the host start of the uid_map line
// taken out (each sandbox gets its own range), and that start.
func hostIDs(probe string) (string, string) {
	m := regexp.MustCompile(`(?m)^uid_map= 0 (\d+) (\d+)$`).FindStringSubmatchIndex(probe)
	if m == nil {
		return probe, ""
	}
	return probe[:m[2]] + "HOST" + probe[m[3]:], probe[m[2]:m[3]]
}

// checkCanonicalOwners checks, on the host, the owners of paths in the tree
// of template name: a tree holds canonical ids (root = 0), whatever host id
// range the build step ran under, so every sandbox maps it as its own.
func checkCanonicalOwners(t *testing.T, s *server, name string, want map[string]string) {
	t.Helper()
	tm, err := template.NewManager(s.TemplatesDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := tm.Get(name)
	if err != nil {
		t.Fatalf("template %s on the host: %v", name, err)
	}
	for p, owner := range want {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(info.RootfsDir, p), &st); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("%d:%d", st.Uid, st.Gid); got != owner {
			t.Errorf("%s in the tree of %s is owned by %s on the host, want %s", p, name, got, owner)
		}
	}
}

// TestBuildStepsIsolatedLikeSandboxes runs the same probe as root in a user
// sandbox and in a template build step: the build sandbox must have exactly
// the sandbox's boundary (capabilities, seccomp, no namespaces or mounts,
// no way to the host or to a neighbour), with internet access on.
func TestBuildStepsIsolatedLikeSandboxes(t *testing.T) {
	s := startServer(t)
	ln, err := net.Listen("tcp", "0.0.0.0:0") // a host service on every address
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	neighbour := s.create(t, "base")
	asRoot(t, neighbour, "nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
	ip := strings.TrimSpace(asRoot(t, neighbour, "hostname -I | awk '{print $1}'").Out)
	probe := fmt.Sprintf(isolationProbe, ln.Addr().(*net.TCPAddr).Port, ip)

	user := s.create(t, "base")
	want := asRoot(t, user, probe).Out
	if !strings.Contains(want, "host=blocked") || !strings.Contains(want, "neighbour=blocked") || !strings.Contains(want, "unshare=refused") {
		t.Fatalf("user sandbox probe (the reference) is not isolated:\n%s", want)
	}
	s.mustBuild(t, "isolation-probe", map[string]any{"fromTemplate": "base", "steps": []map[string]any{
		{"type": "RUN", "args": []string{"bash -c " + shellQuote(probe) + " > /probe.txt", "root"}}}}, "ready")
	got := asRoot(t, s.create(t, "isolation-probe"), "cat /probe.txt").Out
	t.Logf("probe as root in a build step:\n%s", got)
	got, gotHost := hostIDs(got)
	want, wantHost := hostIDs(want)
	if got != want {
		t.Errorf("a build step's boundary differs from a sandbox's:\nbuild step:\n%s\nsandbox:\n%s", got, want)
	}
	if gotHost == wantHost && gotHost != "0" { // with user namespaces each sandbox has its own id range
		t.Errorf("a build step shares host ids %s with a sandbox", gotHost)
	}
	checkCanonicalOwners(t, s, "isolation-probe", map[string]string{"/probe.txt": "0:0", "/home/user": "1000:1000", "/usr/bin/sudo": "0:0"})
	if !strings.Contains(got, "internet=HTTP") {
		t.Errorf("build steps have no internet access:\n%s", got)
	}
	s.healthy(t)
}

// TestHostileImageLayers builds from an image whose layers try to write
// outside the tree (.. names, absolute names, through symlinks to / and to
// host directories), plant a /dev/mem device and overlay attributes: the
// host is untouched and the template holds everything inside its own tree.
func TestHostileImageLayers(t *testing.T) {
	repo, err := testserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tree, err := testregistry.DebianTree(repo)
	if err != nil {
		t.Skipf("no Debian test image: %v", err)
	}
	reg, err := testregistry.Start(repo, testregistry.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	tag := testserver.RandHex(4)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("host data"), 0o644)
	base := diffTar(t, tree)
	ref, err := reg.Push(context.Background(), "cubby-test/hostile:1", v1.Config{}, base, hostileLayer(t, tag, victim))
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t)
	s.mustBuild(t, "hostile-"+tag, map[string]any{"fromImage": ref}, "ready")
	for _, p := range []string{"/tmp/escape-" + tag + "-dotdot", "/tmp/escape-" + tag + "-abs", "/tmp/escape-" + tag + "-via-root",
		"/tmp/escape-" + tag + "-via-up", filepath.Join(filepath.Dir(victim), "escape-"+tag+"-via-hostdir")} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("the image wrote %s on the host (%v)", p, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "host data" {
		t.Errorf("host file changed: %q", b)
	}
	sbx := s.create(t, "hostile-"+tag)
	out := asRoot(t, sbx, "ls /tmp/escape-* "+filepath.Dir(victim)+"/escape-*; test -e /evil-mem && echo HAS-MEM; getfattr -n trusted.overlay.opaque /opaque-dir 2>&1 | grep -c 'opaque=' || true").Out
	for _, want := range []string{"/tmp/escape-" + tag + "-dotdot", "/tmp/escape-" + tag + "-abs", "/tmp/escape-" + tag + "-via-root", "escape-" + tag + "-via-hostdir"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s not inside the template:\n%s", want, out)
		}
	}
	if strings.Contains(out, "HAS-MEM") {
		t.Errorf("the image's device node reached the template:\n%s", out)
	}
	s.healthy(t)
}

// diffTar writes a directory tree as an uncompressed layer.
func diffTar(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := layer.WriteDiff(context.Background(), dir, &buf, layer.DiffOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hostileLayer is a layer an attacker would push.
func hostileLayer(t *testing.T, tag, victim string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h tar.Header, body string) {
		h.Size, h.ModTime, h.Format = int64(len(body)), time.Now(), tar.FormatPAX
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	add(tar.Header{Name: "../../../../../../tmp/escape-" + tag + "-dotdot", Typeflag: tar.TypeReg}, "x")
	add(tar.Header{Name: "/tmp/escape-" + tag + "-abs", Typeflag: tar.TypeReg}, "x")
	add(tar.Header{Name: "rootlink", Typeflag: tar.TypeSymlink, Linkname: "/"}, "")
	add(tar.Header{Name: "rootlink/tmp/escape-" + tag + "-via-root", Typeflag: tar.TypeReg}, "x")
	add(tar.Header{Name: "uplink", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../../../tmp"}, "")
	add(tar.Header{Name: "uplink/escape-" + tag + "-via-up", Typeflag: tar.TypeReg}, "x")
	add(tar.Header{Name: "hostdir", Typeflag: tar.TypeSymlink, Linkname: filepath.Dir(victim)}, "")
	add(tar.Header{Name: "hostdir/escape-" + tag + "-via-hostdir", Typeflag: tar.TypeReg}, "x")
	add(tar.Header{Name: "victimlink", Typeflag: tar.TypeSymlink, Linkname: victim}, "")
	add(tar.Header{Name: "victimlink", Typeflag: tar.TypeReg}, "overwritten through a symlink?")
	add(tar.Header{Name: "evil-mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1, Mode: 0o666}, "")
	add(tar.Header{Name: "opaque-dir/", Typeflag: tar.TypeDir, Mode: 0o755,
		PAXRecords: map[string]string{"SCHILY.xattr.trusted.overlay.opaque": "y"}}, "")
	tw.Close()
	return buf.Bytes()
}

// TestBuildStepsCannotChangeOtherTemplates: a build step as root rewrites
// system files and plants a device; the template it builds on, the
// sandboxes of that template and the host's tree are unchanged, and the
// device never reaches the new template.
func TestBuildStepsCannotChangeOtherTemplates(t *testing.T) {
	s := startServer(t)
	before := asRoot(t, s.create(t, "base"), "sha256sum /etc/passwd /usr/bin/python3; ls -la / | wc -l").Out
	s.mustBuild(t, "vandal", map[string]any{"fromTemplate": "base", "steps": []map[string]any{{"type": "RUN",
		"args": []string{"echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd; rm -f /usr/bin/python3; touch /pwned; mknod /dev-mem c 1 1 || true", "root"}}}}, "ready")
	if after := asRoot(t, s.create(t, "base"), "sha256sum /etc/passwd /usr/bin/python3; ls -la / | wc -l").Out; after != before {
		t.Errorf("a build changed its base template:\nbefore %s\nafter  %s", before, after)
	}
	out := asRoot(t, s.create(t, "vandal"), "test -e /pwned && echo pwned; test -e /dev-mem && echo dev-mem; tail -1 /etc/passwd").Out
	if !strings.Contains(out, "pwned") || strings.Contains(out, "dev-mem") || !strings.Contains(out, "evil:x:0:0") {
		t.Errorf("vandal template: %q (want its own changes, no device)", out)
	}
}

// TestTemplateUploadURLs: uploads are authorised by the URL's signature,
// bound to the template, the files hash and the expiry; nothing else gets
// a file into a build.
func TestTemplateUploadURLs(t *testing.T) {
	s := startServer(t)
	ctx := buildCtx(t)
	b, err := s.RequestBuild(ctx, "uploads")
	if err != nil {
		t.Fatal(err)
	}
	hash := strings.Repeat("ab", 32)
	var link struct {
		URL string `json:"url"`
	}
	if code := apiCall(t, s, s.Key, "GET", "/templates/"+b.TemplateID+"/files/"+hash, &link); code != 201 || link.URL == "" {
		t.Fatalf("files link: %d %+v", code, link)
	}
	u, _ := url.Parse(link.URL)
	q := u.Query()
	bad := map[string]func(url.Values) string{
		"tampered signature": func(v url.Values) string { v.Set("signature", strings.Repeat("0", 64)); return u.Path },
		"other hash":         func(v url.Values) string { return strings.Replace(u.Path, hash, strings.Repeat("cd", 32), 1) },
		"later expiry": func(v url.Values) string {
			v.Set("expires", fmt.Sprint(time.Now().Add(48*time.Hour).Unix()))
			return u.Path
		},
		"no signature":   func(v url.Values) string { v.Del("signature"); return u.Path },
		"other template": func(v url.Values) string { return strings.Replace(u.Path, b.TemplateID, "aaaaaaaaaaaaaaaaaaaa", 1) },
	}
	for name, mutate := range bad {
		v := url.Values{}
		for k, vs := range q {
			v[k] = append([]string(nil), vs...)
		}
		p := mutate(v)
		if code := put(t, s, p+"?"+v.Encode(), "payload"); code != 403 && code != 400 {
			t.Errorf("%s: PUT answered %d, want 403", name, code)
		}
	}
	if code := put(t, s, u.Path+"?"+q.Encode(), "payload"); code != 200 {
		t.Fatalf("the signed URL itself: %d", code)
	}
	var present struct {
		Present bool `json:"present"`
	}
	apiCall(t, s, s.Key, "GET", "/templates/"+b.TemplateID+"/files/"+hash, &present)
	if !present.Present {
		t.Error("upload not recorded")
	}
	for _, p := range []string{"/templates/" + b.TemplateID + "/files/..%2F..%2F..%2Fetc%2Fpasswd", "/templates/..%2F..%2Fx/files/" + hash} {
		if code := apiCall(t, s, s.Key, "GET", p, nil); code != 400 && code != 404 {
			t.Errorf("GET %s: %d", p, code)
		}
	}
	if code := apiCall(t, s, "", "GET", "/templates/"+b.TemplateID+"/files/"+hash, nil); code != 401 {
		t.Errorf("files link without a key: %d", code)
	}
}

func apiCall(t *testing.T, s *server, key, method, path string, out any) int {
	t.Helper()
	resp, data, err := s.Call(context.Background(), key, method, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		_ = json.Unmarshal(data, out)
	}
	return resp.StatusCode
}

func put(t *testing.T, s *server, pathQuery, body string) int {
	t.Helper()
	req, _ := http.NewRequest("PUT", "http://"+s.Addr+pathQuery, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTemplatesOfOtherTeams: a team's private template is another team's
// nothing: not listed, no sandbox from it, no build on it, no changes, no
// build logs, and its name cannot be taken over. Made public, it is usable.
func TestTemplatesOfOtherTeams(t *testing.T) {
	s := startServer(t)
	other := s.teamKey(t, "mallory")
	// A name of its own: the templates directory outlives the server, and
	// the template is made public below.
	name := "private-" + testserver.RandHex(4)
	b, res, err := s.Build(buildCtx(t), name, map[string]any{"fromTemplate": "base", "steps": []map[string]any{
		{"type": "RUN", "args": []string{"echo team-secret > /secret", "root"}}}})
	if err != nil || res.Status != "ready" {
		t.Fatalf("build %s: %+v %v", name, res, err)
	}
	tpl := s.As(other)
	for _, c := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"GET", "/templates/" + name, nil, 404},
		{"DELETE", "/templates/" + name, nil, 404},
		{"PATCH", "/v2/templates/" + name, map[string]any{"public": true}, 404},
		{"POST", "/templates/tags", map[string]any{"target": name + ":default", "tags": []string{"x"}}, 404},
		{"DELETE", "/templates/tags", map[string]any{"name": name, "tags": []string{"default"}}, 404},
		{"GET", "/templates/" + name + "/tags", nil, 404},
		{"GET", "/templates/" + name + "/builds/" + b.BuildID + "/status", nil, 404},
		{"GET", "/templates/" + name + "/builds/" + b.BuildID + "/logs", nil, 404},
		{"GET", "/templates/" + name + "/files/" + strings.Repeat("ab", 32), nil, 404},
		{"GET", "/templates/aliases/" + name, nil, 403},
		{"POST", "/v2/sandboxes", map[string]any{"templateID": name}, 404},
		{"POST", "/v3/templates", map[string]any{"name": name}, 409},
	} {
		code, e, _ := s.call(t, other, c.method, c.path, c.body)
		if code != c.want {
			t.Errorf("%s %s as another team: %d %s, want %d", c.method, c.path, code, e.Message, c.want)
		}
	}
	var list []map[string]any
	tpl.API(context.Background(), "GET", "/v2/templates", nil, &list)
	for _, l := range list {
		if fmt.Sprint(l["names"]) == "["+name+"]" {
			t.Error("another team's private template is listed")
		}
	}
	_, res, err = tpl.Build(buildCtx(t), "stealer", map[string]any{"fromTemplate": name})
	if err != nil || res.Status != "error" || !strings.Contains(res.Reason, "not found") {
		t.Errorf("building on another team's template: %+v %v", res, err)
	}
	code, _, _ := s.call(t, s.Key, "PATCH", "/v2/templates/"+name, map[string]any{"public": true})
	if code != 200 {
		t.Fatalf("make public: %d", code)
	}
	sbx := s.createWith(t, &sdk.CreateOptions{Template: name, ConnectionOptions: s.conn(other)})
	if out := asRoot(t, sbx, "cat /secret").Out; out != "team-secret\n" {
		t.Errorf("public template from another team: %q", out)
	}
}

// TestRegistryCredentialsNotLeaked: the registry password of a build shows
// in no log entry, API answer, stored file or server log.
func TestRegistryCredentialsNotLeaked(t *testing.T) {
	repo, _ := testserver.RepoRoot()
	tree, err := testregistry.DebianTree(repo)
	if err != nil {
		t.Skipf("no Debian test image: %v", err)
	}
	password := "pw-" + testserver.RandHex(12)
	reg, err := testregistry.Start(repo, testregistry.Options{Username: "u", Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	ref, err := reg.PushTree(context.Background(), "cubby-test/debian:bookworm", tree, v1.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t)
	creds := map[string]any{"type": "registry", "username": "u", "password": password}
	res := s.mustBuild(t, "with-creds", map[string]any{"fromImage": ref, "fromImageRegistry": creds}, "ready")
	bad := s.mustBuild(t, "with-bad-creds", map[string]any{"fromImage": ref, "fromImageRegistry": map[string]any{"type": "registry", "username": "u", "password": password + "x"}}, "error")
	var dump strings.Builder
	dump.WriteString(res.LogText() + bad.LogText() + bad.Reason + s.Log())
	for _, p := range []string{"/v2/templates", "/templates/with-creds", "/templates/with-creds/tags"} {
		_, data, _ := s.Call(context.Background(), s.Key, "GET", p, nil)
		dump.Write(data)
	}
	if strings.Contains(dump.String(), password) {
		t.Error("the registry password leaked into logs or API answers")
	}
	for _, dir := range []string{s.DataDir, s.TemplatesDir} {
		if hit := grepDir(t, dir, password); hit != "" {
			t.Errorf("the registry password is stored in %s", hit)
		}
	}
}

// grepDir returns a regular file under dir (not bigger than 64 MiB) holding s.
func grepDir(t *testing.T, dir, s string) string {
	t.Helper()
	var hit string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || hit != "" || !fi.Mode().IsRegular() || fi.Size() > 64<<20 || strings.Contains(p, "/trees/") {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(s)) {
			hit = p
		}
		return nil
	})
	return hit
}

// TestBuildStepMemoryBomb: a step allocating far beyond the build's memory
// fails the build (killed by its cgroup); the server stays healthy.
func TestBuildStepMemoryBomb(t *testing.T) {
	s := startServer(t)
	ctx := buildCtx(t)
	b, err := s.RequestBuild(ctx, "bomb")
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"fromTemplate": "base", "steps": []map[string]any{{"type": "RUN",
		"args": []string{`python3 -c "x = bytearray(8 << 30); print(len(x))"`}}}}
	if code, msg, err := s.StartBuild(ctx, b, body); err != nil || code != 202 {
		t.Fatalf("start: %d %s %v", code, msg, err)
	}
	res, err := s.WaitBuild(ctx, b)
	if err != nil || res.Status != "error" || !strings.Contains(res.Reason, "was killed") {
		t.Fatalf("memory bomb: %+v %v\n%s", res, err, res.LogText())
	}
	s.healthy(t)
}

// TestImagePullsStayOffSandboxesAndMetadata: a build's image reference is
// the requester's choice and the pull runs on the host, so a reference
// naming a sandbox's address (a neighbour serving HTTP) or the link-local
// metadata service fails without any connection being made.
func TestImagePullsStayOffSandboxesAndMetadata(t *testing.T) {
	s := startServer(t)
	neighbour := s.create(t, "base")
	asRoot(t, neighbour, "nohup python3 -m http.server 8000 >/tmp/served.log 2>&1 &")
	ip := strings.TrimSpace(asRoot(t, neighbour, "hostname -I | awk '{print $1}'").Out)
	for name, ref := range map[string]string{"neighbour": ip + ":8000/team/app:1", "metadata": "169.254.169.254/latest/meta:1"} {
		res := s.mustBuild(t, "pull-"+name, map[string]any{"fromImage": ref}, "error")
		if !strings.Contains(res.Reason, "registry address not allowed") {
			t.Errorf("%s (%s): %s", name, ref, res.Reason)
		}
	}
	if log := asRoot(t, neighbour, "cat /tmp/served.log").Out; strings.Contains(log, "GET /v2") {
		t.Errorf("the host connected to the sandbox: %s", log)
	}
}
