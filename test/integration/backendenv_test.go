package integration

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/cubby-dev/cubby/internal/backend/local"
	"github.com/cubby-dev/cubby/internal/backend/local/leaks"
	"github.com/cubby-dev/cubby/internal/network"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/template"
	"github.com/cubby-dev/cubby/internal/userns"
)

// backendEnv drives the local backend directly (below the server) with one OCI
// runtime: the real agent binary (CUBBY_BIN), the base template, a bridge,
// subnet and netns prefix of its own, a run dir below /run/cubby, and user
// namespaces as `cubby serve` gives them by default (userns false: as with
// --userns=false).
type backendEnv struct {
	tb     testing.TB
	bin    string
	dir    string
	runDir string
	lower  string
	prefix string
	userns bool
	net    *network.Manager
	fs     *rootfs.Manager
	rt     runtime.Runtime
	b      *local.Backend
}

// newBackendEnv skips unless root with CUBBY_BIN and a built base template;
// newRT returns the runtime for a state root. name (3 letters) starts the
// bridge and netns names.
func newBackendEnv(tb testing.TB, name string, userns bool, newRT func(stateRoot string, log *slog.Logger) runtime.Runtime) *backendEnv {
	tb.Helper()
	bin := os.Getenv("CUBBY_BIN")
	if bin == "" || os.Geteuid() != 0 {
		tb.Skip("needs root and CUBBY_BIN; run through `make test-integration`")
	}
	tm, err := template.NewManager(templatesDir(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := tm.Get("base")
	if err != nil {
		tb.Skipf("base template not built in %s (`make templates`): %v", templatesDir(), err)
	}
	suffix := randHex(2)
	e := &backendEnv{tb: tb, bin: bin, dir: tb.TempDir(), runDir: "/run/cubby/test-" + randHex(6),
		lower: info.RootfsDir, prefix: name + suffix + "-", userns: userns}
	tb.Cleanup(func() { _ = os.RemoveAll(e.runDir) })
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e.net, err = network.New(network.Config{
		Bridge: name + "v" + suffix, Subnet: mustPrefix(tb, freeSubnet(tb)), Prefix: e.prefix,
	}, log)
	if err != nil {
		tb.Fatal(err)
	}
	if err := e.net.Setup(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = e.net.Teardown(context.Background()); _ = e.net.Close() })
	e.fs = rootfs.New(filepath.Join(e.dir, "disks"), log)
	e.rt = newRT(e.stateRoot(), log)
	e.b = e.newBackend(log)
	return e
}

// templatesDir is $CUBBY_TEMPLATES_DIR, else the repository's .cache/templates.
func templatesDir() string {
	if d := os.Getenv("CUBBY_TEMPLATES_DIR"); d != "" {
		return d
	}
	wd, _ := os.Getwd()
	return filepath.Join(wd, "..", "..", ".cache", "templates")
}

// useTemplate makes the env's sandboxes run built template name (instead of
// base), skipping tb when it is not built.
func (e *backendEnv) useTemplate(tb testing.TB, name string) {
	tb.Helper()
	tm, err := template.NewManager(templatesDir(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := tm.Get(name)
	if err != nil {
		tb.Skipf("template %s not built: %v", name, err)
	}
	e.lower = info.RootfsDir
}

// stateRoot is the runtime's state root (--root).
func (e *backendEnv) stateRoot() string { return filepath.Join(e.dir, "state") }

// newBackend returns a backend over the env's resources (a new one re-adopts
// sandboxes, as a restarted server does).
func (e *backendEnv) newBackend(log *slog.Logger) *local.Backend {
	creator, err := userns.NewCreator(e.bin)
	if err != nil {
		e.tb.Fatal(err)
	}
	e.tb.Cleanup(func() { creator.Close() })
	b, err := local.New(local.Config{Dir: filepath.Join(e.dir, "sandboxes"), RunDir: e.runDir, AgentBinary: e.bin,
		Userns: e.userns, IDs: userns.NewAllocator(""), Namespaces: creator},
		[]runtime.Runtime{e.rt}, e.net, e.fs, log)
	if err != nil {
		e.tb.Fatal(err)
	}
	return b
}

func (e *backendEnv) leakOptions() leaks.Options {
	return leaks.Options{
		SandboxesDir: filepath.Join(e.dir, "sandboxes"),
		RunDir:       e.runDir,
		RuntimeRoots: []string{e.stateRoot()},
	}
}
