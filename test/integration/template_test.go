package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/template"
	"github.com/cubby-dev/cubby/internal/testenv/testregistry"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// debianImage starts a registry (with credentials when user is set) holding
// a minimal Debian image without sudo and without the user "user", and
// returns the image reference.
func debianImage(t testing.TB, user, password string) (string, *testregistry.Registry) {
	t.Helper()
	repo, err := testserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tree, err := testregistry.DebianTree(repo)
	if err != nil {
		t.Skipf("no Debian test image (needs mmdebstrap): %v", err)
	}
	reg, err := testregistry.Start(repo, testregistry.Options{Username: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	ref, err := reg.PushTree(context.Background(), "cubby-test/debian:bookworm", tree,
		v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "IMAGE_VAR=from-image"}})
	if err != nil {
		t.Fatal(err)
	}
	return ref, reg
}

func buildCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// tarOf makes an upload archive of name -> content files.
func tarOf(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, content := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), ModTime: time.Now()})
		tw.Write([]byte(content))
	}
	tw.Close()
	return buf.Bytes()
}

// TestTemplateFromImage builds a template from an image without sudo or the
// user "user" (the build provisions both), with COPY, ENV, WORKDIR, USER,
// RUN and a start command, creates a sandbox from it, and rebuilds with a
// changed last step: every earlier step must come from the cache.
func TestTemplateFromImage(t *testing.T) {
	ref, _ := debianImage(t, "", "")
	s := startServer(t)
	ctx := buildCtx(t)
	b, err := s.RequestBuild(ctx, "itest-image:v1")
	if err != nil {
		t.Fatal(err)
	}
	hash, err := s.Upload(ctx, b.TemplateID, tarOf(t, map[string]string{"site/index.html": "hello from the template\n"}))
	if err != nil {
		t.Fatal(err)
	}
	steps := []map[string]any{
		{"type": "COPY", "args": []string{"site", "/srv/site", "", ""}, "filesHash": hash},
		{"type": "ENV", "args": []string{"GREETING", "hi there"}},
		{"type": "WORKDIR", "args": []string{"/srv/site"}},
		{"type": "RUN", "args": []string{"echo \"$GREETING $IMAGE_VAR $(id -un)\" > made-by-run.txt"}},
		{"type": "USER", "args": []string{"root"}},
		{"type": "RUN", "args": []string{"id -un > /whoami-at-build"}},
	}
	body := map[string]any{"fromImage": ref, "steps": steps,
		"startCmd": "cd /srv/site && exec python3 -m http.server 8000 2>/dev/null || exec sleep infinity", "readyCmd": "test -d /srv/site"}
	code, msg, err := s.StartBuild(ctx, b, body)
	if err != nil || code != 202 {
		t.Fatalf("start: %d %s %v", code, msg, err)
	}
	res, err := s.WaitBuild(ctx, b)
	if err != nil || res.Status != "ready" {
		t.Fatalf("build: %+v %v\n%s", res, err, res.LogText())
	}
	// Provisioning installs sudo (or comes from the cache of an earlier run).
	for _, want := range []string{"[base] FROM " + ref, "[base] provision", "[4/6] RUN", "[finalize]"} {
		if !strings.Contains(res.LogText(), want) && !strings.Contains(res.LogText(), strings.Replace(want, "[base] provision", "[base] Provisioning", 1)) {
			t.Errorf("build log lacks %q:\n%s", want, res.LogText())
		}
	}
	checkImageSandbox(t, s)
	steps[5]["args"] = []string{"id -un > /whoami-at-build; echo changed > /last"}
	b2, res2, err := s.Build(ctx, "itest-image:v1", body)
	if err != nil || res2.Status != "ready" {
		t.Fatalf("rebuild: %+v %v\n%s", res2, err, res2.LogText())
	}
	// Cached: provisioning, COPY, the first RUN (ENV, WORKDIR and USER of
	// existing entries make no layer); the changed last RUN runs.
	if n := strings.Count(res2.LogText(), "CACHED"); n != 3 || !strings.Contains(res2.LogText(), "CACHED RUN echo") {
		t.Errorf("rebuild used the cache for %d steps, want 3 (provision, COPY, RUN):\n%s", n, res2.LogText())
	}
	if b2.TemplateID != b.TemplateID {
		t.Errorf("template ID changed: %s vs %s", b2.TemplateID, b.TemplateID)
	}
}

func checkImageSandbox(t *testing.T, s *server) {
	t.Helper()
	sb := s.create(t, map[string]any{"templateID": "itest-image:v1"})
	ctx := context.Background()
	for cmd, want := range map[string]string{
		"cat made-by-run.txt":          "hi there from-image user\n",
		"cat /srv/site/index.html":     "hello from the template\n",
		"cat /whoami-at-build":         "root\n",
		"whoami; pwd":                  "root\n/srv/site\n",
		"sudo -n true && echo sudo-ok": "sudo-ok\n",
		"id -u user":                   "1000\n",
		"stat -c %U /srv/site":         "user\n",
		"echo $GREETING":               "hi there\n",
	} {
		if out, code := sb.run(ctx, t, cmd); out != want || code != 0 {
			t.Errorf("%s: %q (exit %d), want %q", cmd, out, code, want)
		}
	}
	var exists map[string]any
	if code := s.api("GET", "/templates/aliases/itest-image", nil, &exists); code != 200 {
		t.Errorf("alias lookup: %d %v", code, exists)
	}
}

// TestTemplateBadInput: unknown image or tag, wrong credentials, a failing
// RUN (the retry reuses every cached step before it), a COPY of files never
// uploaded and an unknown step type each fail clearly.
func TestTemplateBadInput(t *testing.T) {
	ref, reg := debianImage(t, "alice", "right-password")
	s := startServer(t)
	ctx := buildCtx(t)
	creds := map[string]any{"type": "registry", "username": "alice", "password": "right-password"}
	fail := func(name string, body map[string]any, wants ...string) testserver.BuildResult {
		t.Helper()
		_, res, err := s.Build(ctx, name, body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.Status != "error" {
			t.Fatalf("%s: status %s, want error\n%s", name, res.Status, res.LogText())
		}
		for _, w := range wants {
			if !strings.Contains(res.Reason+"\n"+res.LogText(), w) {
				t.Errorf("%s: reason/log lacks %q:\nreason: %s\nlog:\n%s", name, w, res.Reason, res.LogText())
			}
		}
		return res
	}
	fail("bad-tag", map[string]any{"fromImage": reg.Addr + "/cubby-test/debian:no-such-tag", "fromImageRegistry": creds}, "MANIFEST_UNKNOWN", "image not found")
	fail("bad-repo", map[string]any{"fromImage": reg.Addr + "/nope/nope:1", "fromImageRegistry": creds}, "image not found")
	wrong := map[string]any{"type": "registry", "username": "alice", "password": "wrong"}
	fail("bad-creds", map[string]any{"fromImage": ref, "fromImageRegistry": wrong}, "registry authentication failed", "UNAUTHORIZED")
	fail("no-creds", map[string]any{"fromImage": ref}, "registry authentication failed")

	run := func(cmd string) map[string]any { return map[string]any{"type": "RUN", "args": []string{cmd, "root"}} }
	body := map[string]any{"fromImage": ref, "fromImageRegistry": creds,
		"steps": []map[string]any{run("echo one > /one"), run("echo oops; echo to-stderr >&2; exit 3")}}
	res := fail("run-fails", body, "exited with code 3", "oops", "to-stderr")
	if res.Step != "2" {
		t.Errorf("failed step %q, want 2", res.Step)
	}
	res = fail("run-fails", body, "exited with code 3")
	if !strings.Contains(res.LogText(), "CACHED [base] provision") || !strings.Contains(res.LogText(), "CACHED RUN echo one > /one (as root)") {
		t.Errorf("retry did not reuse the cached steps:\n%s", res.LogText())
	}

	b, err := s.RequestBuild(ctx, "no-upload")
	if err != nil {
		t.Fatal(err)
	}
	copyStep := map[string]any{"type": "COPY", "args": []string{"app", "/app"}, "filesHash": strings.Repeat("a", 64)}
	code, msg, _ := s.StartBuild(ctx, b, map[string]any{"fromTemplate": "base", "steps": []map[string]any{copyStep}})
	if code != 400 || !strings.Contains(msg, "never uploaded") {
		t.Errorf("COPY of files never uploaded: %d %q", code, msg)
	}
	code, msg, _ = s.StartBuild(ctx, b, map[string]any{"fromTemplate": "base", "steps": []map[string]any{{"type": "FROB", "args": []string{"x"}}}})
	if code != 400 || !strings.Contains(msg, "unknown step type") {
		t.Errorf("unknown step: %d %q", code, msg)
	}
	code, msg, _ = s.StartBuild(ctx, b, map[string]any{"fromTemplate": "base", "fromImage": "x"})
	if code != 400 {
		t.Errorf("both sources: %d %q", code, msg)
	}
	if c := s.api("GET", "/templates/aliases/run-fails", nil, nil); c != 404 {
		t.Errorf("a failed build left a template: %d", c)
	}
}

// TestTemplateBuildKilled SIGKILLs the server during a build: after the
// restart the build is failed, nothing was published, and no build sandbox,
// mount or staging tree is left.
func TestTemplateBuildKilled(t *testing.T) {
	s := startServer(t)
	ctx := buildCtx(t)
	b, err := s.RequestBuild(ctx, "killed-build")
	if err != nil {
		t.Fatal(err)
	}
	body := map[string]any{"fromTemplate": "base", "steps": []map[string]any{{"type": "RUN", "args": []string{"echo started; sleep 600"}}}}
	if code, msg, err := s.StartBuild(ctx, b, body); err != nil || code != 202 {
		t.Fatalf("start: %d %s %v", code, msg, err)
	}
	waitLog(t, s, b, "started")
	s.kill9()
	s.restart()
	res, err := s.WaitBuild(ctx, b)
	if err != nil || res.Status != "error" || !strings.Contains(res.Reason, "server stopped") {
		t.Fatalf("after restart: %+v %v", res, err)
	}
	if c := s.api("GET", "/templates/aliases/killed-build", nil, nil); c != 404 {
		t.Errorf("a killed build published a template: %d", c)
	}
	waitFor(t, func() bool { return len(mountsUnder(t, s.DataDir)) == 0 }, "mounts under the data dir: %v", func() any { return mountsUnder(t, s.DataDir) })
	waitFor(t, func() bool { return len(dirEntries(filepath.Join(s.DataDir, "sandboxes"))) == 0 }, "sandbox dirs left: %v",
		func() any { return dirEntries(filepath.Join(s.DataDir, "sandboxes")) })
	if out, _ := exec.Command("runc", "--root", filepath.Join(s.DataDir, "runc"), "list", "-q").Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("containers left: %s", out)
	}
}

func waitLog(t *testing.T, s *server, b testserver.TemplateBuild, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var st struct {
			LogEntries []struct{ Message string } `json:"logEntries"`
		}
		s.api("GET", "/templates/"+b.TemplateID+"/builds/"+b.BuildID+"/status", nil, &st)
		for _, e := range st.LogEntries {
			if strings.TrimSpace(e.Message) == want {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("build log never showed %q\n%s", want, s.log())
}

// waitFor polls ok until it holds, failing the test after five minutes: what
// it waits for is background clean-up, which waits for every template build
// sharing the templates directory to finish (under `make test` other test
// packages build templates there at the same time).
func waitFor(t *testing.T, ok func() bool, format string, arg func() any) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			t.Errorf(format, arg())
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ms, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range ms {
		if strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	return out
}

func dirEntries(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestTemplateConcurrentBuilds starts two builds of one name at once: the
// later waits for the earlier, both succeed, and the name ends on the later.
func TestTemplateConcurrentBuilds(t *testing.T) {
	s := startServer(t)
	ctx := buildCtx(t)
	var wg sync.WaitGroup
	results := make([]testserver.BuildResult, 2)
	builds := make([]testserver.TemplateBuild, 2)
	for i := range 2 {
		b, err := s.RequestBuild(ctx, "racing")
		if err != nil {
			t.Fatal(err)
		}
		builds[i] = b
		body := map[string]any{"fromTemplate": "base", "steps": []map[string]any{
			{"type": "RUN", "args": []string{"sleep 2; echo " + b.BuildID + " > /built-by", "root"}}}}
		if code, msg, err := s.StartBuild(ctx, b, body); err != nil || code != 202 {
			t.Fatalf("start %d: %d %s %v", i, code, msg, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = s.WaitBuild(ctx, builds[i])
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r.Status != "ready" {
			t.Fatalf("build %d: %+v\n%s", i, r, r.LogText())
		}
	}
	if !strings.Contains(results[1].LogText(), "Waiting for another build") { // its template's, or a build slot
		t.Errorf("the later build did not wait:\n%s", results[1].LogText())
	}
	sb := s.create(t, map[string]any{"templateID": "racing"})
	if out, _ := sb.run(context.Background(), t, "cat /built-by"); out != builds[1].BuildID+"\n" {
		t.Errorf("racing resolves to %q, want the later build %s", out, builds[1].BuildID)
	}
}

// TestTemplateDeleteKeepsRunningSandbox deletes a template while a sandbox
// of it runs: the template is gone at once, the sandbox keeps reading its
// files (the clean-up keeps its tree), and once the sandbox is gone the next
// clean-up removes the tree. A template with snapshots is not deleted (409)
// until they are.
func TestTemplateDeleteKeepsRunningSandbox(t *testing.T) {
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbit", Args: []string{"--template-gc-age", "1s"}})
	s := &server{Server: ts, t: t}
	ctx := buildCtx(t)
	_, res, err := s.Build(ctx, "doomed", map[string]any{"fromTemplate": "base",
		"steps": []map[string]any{{"type": "RUN", "args": []string{"seq 1 20000 > /numbers", "root"}}}})
	if err != nil || res.Status != "ready" {
		t.Fatalf("build: %+v %v", res, err)
	}
	tm, err := template.NewManager(s.TemplatesDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	tree := mustTemplate(t, tm, "doomed").RootfsDir
	sb := s.create(t, map[string]any{"templateID": "doomed"})
	var snap struct {
		SnapshotID string `json:"snapshotID"`
	}
	if code := s.api("POST", "/sandboxes/"+sb.ID+"/snapshots", map[string]any{}, &snap); code != 201 {
		t.Fatalf("snapshot: %d", code)
	}
	if code := s.api("DELETE", "/templates/doomed", nil, nil); code != 409 {
		t.Errorf("delete a template with a snapshot: %d, want 409", code)
	}
	if code := s.api("DELETE", "/templates/"+url.PathEscape(snap.SnapshotID), nil, nil); code != 204 {
		t.Fatalf("delete the snapshot: %d", code)
	}
	if code := s.api("DELETE", "/templates/doomed", nil, nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code := s.api("GET", "/templates/aliases/doomed", nil, nil); code != 404 {
		t.Errorf("deleted template still exists: %d", code)
	}
	if code := s.api("POST", "/v2/sandboxes", map[string]any{"templateID": "doomed"}, nil); code != 404 {
		t.Errorf("create from a deleted template: %d", code)
	}
	time.Sleep(2 * time.Second) // the clean-up runs in the background
	if out, code := sb.run(ctx, t, "wc -l < /numbers; ls /usr/bin | wc -l"); code != 0 || !strings.HasPrefix(out, "20000\n") {
		t.Errorf("running sandbox broken after delete: %q %d", out, code)
	}
	if _, err := os.Stat(tree); err != nil {
		t.Errorf("the clean-up removed a tree in use: %v", err)
	}
	if code := s.api("DELETE", "/sandboxes/"+sb.ID, nil, nil); code != 204 {
		t.Fatalf("kill: %d", code)
	}
	s.kill9()
	s.restart() // cleans up again at start
	waitFor(t, func() bool { _, err := os.Stat(tree); return os.IsNotExist(err) }, "tree of the deleted template still there: %v", func() any { return tree })
	if code := s.api("DELETE", "/templates/base", nil, nil); code != 403 {
		t.Errorf("deleting the built-in default template: %d, want 403", code)
	}
}

func mustTemplate(t *testing.T, tm *template.Manager, ref string) template.Info {
	t.Helper()
	info, err := tm.Get(ref)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
