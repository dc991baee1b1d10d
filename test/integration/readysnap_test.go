package integration

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// valueServer is a template start command: an HTTP server on port 8080 that
// draws a random value when it starts and serves it. readyCmd passes once it
// answers.
const (
	valueServer = `exec python3 -c 'import http.server, uuid
v = uuid.uuid4().hex.encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(v)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8080), H).serve_forever()'`
	valueReady = `curl -sf http://127.0.0.1:8080/ >/dev/null`
	valueGet   = `curl -sf http://127.0.0.1:8080/`
)

// startRuntimeServer starts cubby serve with --runtime rt (runsc skips the
// test without bin/runsc).
func startRuntimeServer(t *testing.T, rt string) *server {
	t.Helper()
	if rt == "runsc" {
		runscBinary(t)
	}
	ts := testserver.Start(t, testserver.Options{BridgePrefix: "cbrs", Args: []string{"--domain", "cubby.test", "--runtime", rt}})
	return &server{Server: ts, t: t}
}

// buildValueTemplate builds template name from base with valueServer as its
// start command and returns the build's log.
func buildValueTemplate(t *testing.T, s *server, name string, force bool) string {
	t.Helper()
	_, res, err := s.Build(buildCtx(t), name, map[string]any{"fromTemplate": "base", "force": force,
		"startCmd": valueServer, "readyCmd": valueReady})
	if err != nil || res.Status != "ready" {
		t.Fatalf("build %s: %+v %v\n%s", name, res, err, res.LogText())
	}
	return res.LogText()
}

// valueOf creates a sandbox of template and returns the value its start
// command's server answers and its hostname.
func valueOf(t *testing.T, s *server, template string) (sb *sandbox, value, hostname string) {
	t.Helper()
	sb = s.create(t, map[string]any{"templateID": template})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, code := sb.run(ctx, t, valueGet+"; echo; hostname")
	if code != 0 {
		t.Fatalf("sandbox %s: %q exit %d", sb.ID, out, code)
	}
	value, hostname, _ = strings.Cut(strings.TrimSpace(out), "\n")
	return sb, value, hostname
}

// readySnapshots lists the ready snapshots of templates the server holds.
func readySnapshots(t *testing.T, s *server) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(s.DataDir, "snapshots", "tmpl*"))
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestTemplateReadySnapshot: under gVisor a template whose start command
// became ready at build end starts its sandboxes from a memory snapshot of
// it: every sandbox serves the value the build's server drew (restored, not
// restarted) under its own ID and hostname, also after a server restart
// (the start-up prune keeps the snapshot); a rebuild replaces the snapshot
// and a delete drops it. Under runc each sandbox runs the start command and
// serves a value of its own.
func TestTemplateReadySnapshot(t *testing.T) {
	t.Run("runsc", func(t *testing.T) {
		s := startRuntimeServer(t, "runsc")
		log := buildValueTemplate(t, s, "ready-value", false)
		if !strings.Contains(log, "[finalize] memory snapshot of the ready sandbox taken") {
			t.Fatalf("build took no memory snapshot:\n%s", log)
		}
		snaps := readySnapshots(t, s)
		if len(snaps) != 1 {
			t.Fatalf("ready snapshots on disk: %v", snaps)
		}
		a, va, ha := valueOf(t, s, "ready-value")
		b, vb, hb := valueOf(t, s, "ready-value")
		if va == "" || va != vb {
			t.Errorf("values %q and %q: want the same, restored from the snapshot", va, vb)
		}
		if ha != a.ID || hb != b.ID || a.ID == b.ID {
			t.Errorf("hostnames %q, %q of sandboxes %s, %s", ha, hb, a.ID, b.ID)
		}
		if !strings.Contains(s.log(), "restores its template's memory snapshot") {
			t.Errorf("the log does not say the sandboxes restored the snapshot")
		}
		s.kill9()
		s.restart()
		c, vc, _ := valueOf(t, s, "ready-value")
		if vc != va {
			t.Errorf("after a restart: %q, want the snapshot's %q", vc, va)
		}
		// A dropped snapshot's data goes with the last sandbox running from it.
		for _, sb := range []*sandbox{a, b, c} {
			s.api(http.MethodDelete, "/sandboxes/"+sb.ID, nil, nil)
		}
		buildValueTemplate(t, s, "ready-value", true)
		waitFor(t, func() bool {
			_, err := os.Stat(snaps[0])
			return os.IsNotExist(err) && len(readySnapshots(t, s)) == 1
		}, "the replaced build's snapshot stays: %v", func() any { return readySnapshots(t, s) })
		d, vd, _ := valueOf(t, s, "ready-value")
		if vd == va || vd == "" {
			t.Errorf("after a rebuild: %q, want a new value (was %q)", vd, va)
		}
		s.api(http.MethodDelete, "/sandboxes/"+d.ID, nil, nil)
		if code := s.api(http.MethodDelete, "/templates/ready-value", nil, nil); code != http.StatusNoContent {
			t.Fatalf("delete template: %d", code)
		}
		waitFor(t, func() bool { return len(readySnapshots(t, s)) == 0 },
			"the deleted template's snapshot stays: %v", func() any { return readySnapshots(t, s) })
	})
	t.Run("runc", func(t *testing.T) {
		s := startRuntimeServer(t, "runc")
		log := buildValueTemplate(t, s, "ready-value-runc", false)
		if !strings.Contains(log, "cannot checkpoint a running sandbox") {
			t.Errorf("the build log does not say runc runs the start command at create:\n%s", log)
		}
		if snaps := readySnapshots(t, s); len(snaps) != 0 {
			t.Errorf("ready snapshots under runc: %v", snaps)
		}
		_, va, _ := valueOf(t, s, "ready-value-runc")
		_, vb, _ := valueOf(t, s, "ready-value-runc")
		if va == "" || vb == "" || va == vb {
			t.Errorf("values %q and %q: want one of its own each (start command at create)", va, vb)
		}
		if !strings.Contains(s.log(), "runs its template's start command at create") {
			t.Errorf("the log does not say the sandboxes ran the start command")
		}
	})
}

// BenchmarkTemplateReadySnapshot: under gVisor, the create latency (until
// the ready command passes) of a sandbox of a template whose start command
// is valueServer, by the two paths a create takes: "start-command" boots
// the sandbox and runs the start command until ready; "snapshot" restores
// the memory snapshot of a ready sandbox (what a template build takes)
// under the new sandbox's identity. Backend creates as the control plane
// issues them (the API's own cost, the same for both, is left out).
func BenchmarkTemplateReadySnapshot(b *testing.B) {
	e := newRunscBackend(b)
	ctx := context.Background()
	start := &backend.StartCommand{Cmd: valueServer, ReadyCmd: valueReady}
	create := func(b *testing.B, snap string) func() {
		sb, err := createStart(b, e, snap, start)
		if err != nil {
			b.Fatal(err)
		}
		return func() { _ = e.b.Kill(ctx, sb.id) }
	}
	b.Run("start-command", func(b *testing.B) {
		medianOf(b, func(int) func() { return create(b, "") })
	})
	src, err := createStart(b, e, "", start)
	if err != nil {
		b.Fatal(err)
	}
	sn, err := e.b.Snapshot(ctx, src.id, "r"+randHex(8))
	if err != nil || sn.Mode != backend.SnapshotFull {
		b.Fatalf("snapshot: %+v %v", sn, err)
	}
	_ = e.b.Kill(ctx, src.id)
	b.Cleanup(func() { _ = e.b.DeleteSnapshot(ctx, sn.ID) })
	b.Run("snapshot", func(b *testing.B) {
		medianOf(b, func(int) func() { return create(b, sn.ID) })
	})
}
