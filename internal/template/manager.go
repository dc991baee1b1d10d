package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cubby-dev/cubby/internal/runtime/oci"
)

// ErrNotFound is wrapped by Get for an unknown template ID or alias.
var ErrNotFound = errors.New("template not found")

// ErrAliasTaken is wrapped by Build when the definition's name or an alias
// already names a different template.
var ErrAliasTaken = errors.New("template alias already in use")

// Info describes one built template tree (stored as template.json next to it).
type Info struct {
	ID        string            `json:"id"`        // IDFor(Name)
	Name      string            `json:"name"`      // primary alias
	Aliases   []string          `json:"aliases"`   // Name first, then the definition's aliases
	Digest    string            `json:"digest"`    // Definition.Digest of the build inputs
	RootfsDir string            `json:"rootfsDir"` // absolute path of the immutable rootfs tree (recomputed on load)
	BuiltAt   time.Time         `json:"builtAt"`
	SizeBytes int64             `json:"sizeBytes"` // disk usage of the rootfs, bytes
	User      string            `json:"user"`      // default user (E2B wire §3.6)
	Workdir   string            `json:"workdir"`   // default working directory
	Env       map[string]string `json:"env,omitempty"`
	Packages  []string          `json:"packages"` // Debian packages requested (Definition.Includes)
	// Runtime is the definition's OCI runtime ("runc", "runsc"; "" = the server's
	// default). Not part of Digest: a build that hits a cached tree rewrites it.
	Runtime string `json:"runtime,omitempty"`
}

// Manager builds templates into a directory and looks them up. Layout:
//
//	<dir>/<id>/<tree>/rootfs         immutable tree; <tree> = digest (digest.N after forced rebuilds)
//	<dir>/<id>/<tree>/template.json  Info of that tree
//	<dir>/<id>/current               symlink to the template's current <tree>
//	<dir>/.staging/<id>-*            builds in progress (removed on failure)
//	<dir>/.locks/<id>.lock           flock serialising builds and prunes of one template
//
// A Manager is safe for concurrent use, also by several processes sharing dir.
type Manager struct {
	dir        string
	log        *slog.Logger
	mmdebstrap string
	hostCA     string // host CA bundle trusted by build steps; "" = none
}

// hostCABundle is Debian's CA bundle path (update-ca-certificates output, which
// includes local CAs from /usr/local/share/ca-certificates).
const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// NewManager returns a Manager storing templates under dir (created on first
// build). Builds need root and mmdebstrap in PATH. A nil log discards log output.
func NewManager(dir string, log *slog.Logger) *Manager {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{dir: dir, log: log, mmdebstrap: "mmdebstrap"}
	if _, err := os.Stat(hostCABundle); err == nil {
		m.hostCA = hostCABundle
	}
	return m
}

// Build returns the template built from def, building it with mmdebstrap (as root)
// unless a tree with the same digest exists and force is false. A new tree becomes
// the template's current one atomically; older trees stay until Prune. Progress
// lines go to progress (may be nil). Cancelling ctx kills mmdebstrap; a failed or
// cancelled build leaves nothing behind. Errors wrap ErrInvalidDefinition,
// ErrAliasTaken, ctx.Err() or the build failure (with mmdebstrap's last lines).
func (m *Manager) Build(ctx context.Context, def Definition, progress io.Writer, force bool) (Info, error) {
	def = def.withDefaults()
	if err := def.Validate(); err != nil {
		return Info{}, fmt.Errorf("build template %q: %w", def.Name, err)
	}
	files, err := def.resolveFiles()
	if err != nil {
		return Info{}, fmt.Errorf("build template %q: %w", def.Name, err)
	}
	digest, err := digestOf(def, files)
	if err != nil {
		return Info{}, err
	}
	id := IDFor(def.Name)
	unlock, err := m.lock(ctx, id)
	if err != nil {
		return Info{}, fmt.Errorf("build template %q: %w", def.Name, err)
	}
	defer unlock()
	if err := m.checkAliases(id, def); err != nil {
		return Info{}, fmt.Errorf("build template %q: %w", def.Name, err)
	}
	if !force {
		if info, ok := m.cached(id, digest, progress); ok {
			return m.syncRuntime(info, def.Runtime)
		}
	}
	info, err := m.build(ctx, def, files, id, digest, progress)
	if err != nil {
		m.log.Warn("template build failed", "id", id, "name", def.Name, "digest", digest, "err", err)
		return Info{}, fmt.Errorf("build template %q: %w", def.Name, err)
	}
	return info, nil
}

// cached returns an existing tree of id with digest, making it current.
func (m *Manager) cached(id, digest string, progress io.Writer) (Info, bool) {
	for _, tree := range m.trees(id) {
		if tree != digest && !strings.HasPrefix(tree, digest+".") {
			continue
		}
		info, err := m.readInfo(id, tree)
		if err != nil || info.Digest != digest {
			continue
		}
		if err := m.setCurrent(id, tree); err != nil {
			m.log.Warn("template cache hit but current pointer not switched", "id", id, "err", err)
			continue
		}
		if progress != nil {
			fmt.Fprintf(progress, "template %s (%s) digest %s already built at %s, cached\n",
				info.Name, id, digest, info.BuiltAt.Format(time.RFC3339))
		}
		return info, true
	}
	return Info{}, false
}

// build runs mmdebstrap into a staging dir and commits the result.
func (m *Manager) build(ctx context.Context, def Definition, files []resolvedFile, id, digest string, progress io.Writer) (Info, error) {
	steps := plan(def, files)
	rec := newBuildRecorder()
	out := io.Writer(rec)
	if progress != nil {
		out = io.MultiWriter(progress, rec)
	}
	pw := newProgressWriter(out, steps)
	if err := os.MkdirAll(m.stagingDir(), 0o755); err != nil {
		return Info{}, fmt.Errorf("staging: %w", err)
	}
	stage, err := os.MkdirTemp(m.stagingDir(), id+"-")
	if err != nil {
		return Info{}, fmt.Errorf("staging: %w", err)
	}
	defer func() {
		if err := removeTree(stage); err != nil {
			m.log.Error("remove template staging dir", "dir", stage, "err", err)
		}
	}()
	treeDir := filepath.Join(stage, "tree")
	// stage and tree are 0755 so apt's _apt user can reach the rootfs during the
	// build and sandboxes can traverse the committed tree.
	for d, mode := range map[string]os.FileMode{stage: 0o755, filepath.Join(stage, "ctx"): 0o700,
		filepath.Join(stage, "tmp"): 0o700, treeDir: 0o755} {
		if err := os.Mkdir(d, mode); err != nil && d != stage {
			return Info{}, fmt.Errorf("staging: %w", err)
		}
		if err := os.Chmod(d, mode); err != nil {
			return Info{}, fmt.Errorf("staging: %w", err)
		}
	}
	script, err := writeContext(filepath.Join(stage, "ctx"), def, files, m.hostCA)
	if err != nil {
		return Info{}, err
	}
	m.log.Info("template build started", "id", id, "name", def.Name, "digest", digest)
	pw.Step(1)
	rootfs := filepath.Join(treeDir, "rootfs")
	if err := m.runMmdebstrap(ctx, def, rootfs, script, filepath.Join(stage, "tmp"), pw); err != nil {
		return Info{}, err
	}
	dropped, err := dropUngrantableCaps(rootfs, oci.GrantedCaps())
	if err != nil {
		return Info{}, err
	}
	if len(dropped) > 0 {
		pw.Printf("removed file capabilities sandboxes cannot grant from %s", strings.Join(dropped, ", "))
	}
	pw.Step(len(steps))
	pw.Printf("build finished in %s; committing the tree", pw.Elapsed())
	if err := rec.writeTo(treeDir); err != nil {
		return Info{}, err
	}
	info, err := m.commit(ctx, def, id, digest, treeDir)
	if err != nil {
		return Info{}, err
	}
	pw.Printf("built template %s (%s) digest %s: %s in %s", def.Name, id, digest, humanBytes(info.SizeBytes), pw.Elapsed())
	m.log.Info("template built", "id", id, "name", def.Name, "digest", digest,
		"bytes", info.SizeBytes, "seconds", pw.Elapsed().Seconds(), "rootfs", info.RootfsDir)
	return info, nil
}

// runMmdebstrap runs mmdebstrap in its own mount and PID namespace, so its chroot
// mounts never reach the host and killing it kills every process it started.
func (m *Manager) runMmdebstrap(ctx context.Context, def Definition, rootfs, script, tmp string, pw *progressWriter) error {
	args := []string{
		"--mode=root", "--format=directory", "--variant=" + def.Variant,
		"--include=" + strings.Join(def.Includes(), ","),
		"--customize-hook=sh " + shq(script) + ` "$1"`,
		def.Suite, rootfs,
	}
	cmd := exec.CommandContext(ctx, m.mmdebstrap, args...)
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "LC_ALL=C.UTF-8")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:      true,
		Pdeathsig:    syscall.SIGKILL,
		Cloneflags:   syscall.CLONE_NEWPID,
		Unshareflags: syscall.CLONE_NEWNS, // Go makes / recursively private in the child
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("mmdebstrap cancelled: %w", ctxErr)
	}
	if err != nil {
		return fmt.Errorf("mmdebstrap %s: %w; last output:\n%s", def.Suite, err, pw.Tail())
	}
	return nil
}

func humanBytes(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
