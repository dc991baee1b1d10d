package template

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/image"
	"github.com/cubby-dev/cubby/internal/outbound"
)

// Sandboxes runs build steps: the local backend implements it. Build
// sandboxes are ordinary sandboxes (same runtime, seccomp, cgroups, netns
// and capabilities as users' sandboxes) with internet access.
type Sandboxes interface {
	Create(ctx context.Context, req backend.CreateRequest) (backend.Instance, error)
	// Commit stops the sandbox and writes its root filesystem's changes to w
	// as an uncompressed OCI layer tar.
	Commit(ctx context.Context, id string, w io.Writer) error
	Kill(ctx context.Context, id string) error
}

// Files resolves the file uploads of COPY steps.
type Files interface {
	// Open returns the tar archive (plain or gzip) uploaded for filesHash
	// in template templateID and the sha256 digest of its bytes. Errors
	// wrap ErrFilesMissing when nothing was uploaded.
	Open(templateID, filesHash string) (io.ReadSeekCloser, v1.Hash, error)
}

// ErrFilesMissing is wrapped by Files.Open for a hash nothing was uploaded for.
var ErrFilesMissing = errors.New("files were not uploaded")

// BuilderConfig configures a Builder.
type BuilderConfig struct {
	Manager   *Manager
	Sandboxes Sandboxes     // nil: only Debian bases without steps can be built
	Puller    *image.Puller // nil: fromImage is refused
	// Outbound is passed to every build step (proxy variables, CA bundle).
	Outbound outbound.Settings
	// NewSandboxID returns IDs for build sandboxes ([a-z0-9]{20}).
	NewSandboxID func() string
	// DiskMB is the writable layer of each build sandbox; default 10 GiB.
	DiskMB int
	// StepTimeout bounds one RUN step; default 30 min.
	StepTimeout time.Duration
	// ReadySnapshots, when set, makes builds with a start command snapshot
	// the ready sandbox (gVisor) so the template's sandboxes restore it;
	// nil: they run the start command at create.
	ReadySnapshots ReadySnapshots
	Log            *slog.Logger
}

// Builder builds templates. Safe for concurrent use; builds of one template
// run one at a time (a later one waits for the earlier to finish).
type Builder struct {
	cfg BuilderConfig
	m   *Manager
	log *slog.Logger
}

// NewBuilder returns a Builder. Errors: no Manager.
func NewBuilder(cfg BuilderConfig) (*Builder, error) {
	if cfg.Manager == nil {
		return nil, errors.New("template builder: a manager is required")
	}
	if cfg.DiskMB <= 0 {
		cfg.DiskMB = 10 << 10
	}
	if cfg.StepTimeout <= 0 {
		cfg.StepTimeout = 30 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Builder{cfg: cfg, m: cfg.Manager, log: cfg.Log}, nil
}

// Log levels of build log entries (E2B LogLevel).
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
)

// Step names of log entries and failures besides step numbers (E2B: "base"
// is the FROM step, "finalize" the start and ready commands).
const (
	StepBase     = "base"
	StepFinalize = "finalize"
)

// Entry is one build log line.
type Entry struct {
	Time    time.Time `json:"timestamp"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
	Step    string    `json:"step,omitempty"` // "base", "1".."n", "finalize" or ""
}

// String renders e as a progress line: "15:04:05 INFO  message".
func (e Entry) String() string {
	return fmt.Sprintf("%s %-5s %s", e.Time.Local().Format("15:04:05"), strings.ToUpper(e.Level), e.Message)
}

// Request is one build.
type Request struct {
	TemplateID string   // IDFor(Name)
	Name       string   // primary name
	Team       string   // owning team ("" = none: built-ins)
	Aliases    []string // further names
	BuildID    string
	Tags       []string // tags pointing at the build once ready; none = DefaultTag
	Spec       Spec
	CPUCount   int // vCPUs and memory recorded for the template (and used by build sandboxes)
	MemoryMB   int
	Files      Files       // COPY uploads; may be nil without COPY steps
	Log        func(Entry) // build log; may be nil
	// Waiting (may be nil) is called with true when the build must wait for
	// another build of the template, and with false once it may go on.
	Waiting func(waiting bool)
}

// NewBuildID returns a random build ID (an RFC 4122 version 4 UUID, as E2B's).
func NewBuildID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// StepError is the error of a failed build: which step and why.
type StepError struct {
	Step     string // "base", "1".."n" or "finalize"
	ExitCode int    // exit code of a failed command; -1 otherwise
	Err      error
}

func (e *StepError) Error() string { return e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// Build runs req and publishes the result under its tags. Steps whose inputs
// (everything before them included) match a cached result are not run
// again unless forced. Cancelling ctx stops the running step; a failed or
// cancelled build publishes nothing. Errors: *StepError for a failing step
// (wrapping ErrInvalidSpec, ErrFilesMissing, image errors or the command's
// failure), ErrAliasTaken, ctx's error.
func (b *Builder) Build(ctx context.Context, req Request) (Info, error) {
	if err := req.Spec.Validate(); err != nil {
		return Info{}, &StepError{Step: StepBase, ExitCode: -1, Err: err}
	}
	if len(req.Tags) == 0 {
		req.Tags = []string{DefaultTag}
	}
	unlock, err := b.lockBuild(ctx, req)
	if err != nil {
		return Info{}, err
	}
	defer unlock()
	unshared, err := b.m.lockShared(ctx)
	if err != nil {
		return Info{}, err
	}
	defer unshared()
	rec, log := newBuildRecorder(), req.Log
	req.Log = func(e Entry) {
		rec.add(e)
		if log != nil {
			log(e)
		}
	}
	r := &run{b: b, req: req, started: time.Now()}
	info, err := r.build(ctx)
	if err != nil {
		emit(req.Log, LevelError, stepOf(err), "Build failed: %v", err)
	}
	if werr := rec.writeFile(b.m.buildLogPath(req.BuildID)); werr != nil {
		b.log.Warn("build log not kept", "build", req.BuildID, "err", werr)
	}
	return info, err
}

// stepOf is the step a build error names ("" when none).
func stepOf(err error) string {
	var se *StepError
	if errors.As(err, &se) {
		return se.Step
	}
	return ""
}

// lockBuild takes template req.TemplateID's build lock, reporting a wait.
func (b *Builder) lockBuild(ctx context.Context, req Request) (func(), error) {
	name := "template-" + req.TemplateID
	if unlock, ok, err := b.m.tryLock(name); err != nil || ok {
		return unlock, err
	}
	if req.Waiting != nil {
		req.Waiting(true)
		defer req.Waiting(false)
	}
	emit(req.Log, LevelInfo, "", "Waiting for another build of %s to finish", req.Name)
	return b.m.lock(ctx, name)
}

func emit(log func(Entry), level, step, format string, args ...any) {
	if log == nil {
		return
	}
	log(Entry{Time: time.Now().UTC(), Level: level, Message: fmt.Sprintf(format, args...), Step: step})
}

// state is what a build has made so far.
type state struct {
	chain     v1.Hash       // identity of the current tree (OCI chain ID)
	tree      string        // host path of the current tree
	layers    []image.Layer // layers of the tree, bottom first
	shippable bool          // layers describe the whole tree
	user      string
	workdir   string
	env       map[string]string
}

// envList is s.env as sorted KEY=value pairs.
func (s state) envList() []string {
	out := make([]string, 0, len(s.env))
	for _, k := range slices.Sorted(maps.Keys(s.env)) {
		out = append(out, k+"="+s.env[k])
	}
	return out
}

// run is one Build in progress.
type run struct {
	b       *Builder
	req     Request
	st      state
	forced  bool // an earlier step ran although cached: later lookups still apply (chain changed)
	started time.Time
	ready   *readySnap // the ready snapshot finalize took; nil = none
}

func (r *run) logf(level, step, format string, args ...any) {
	emit(r.req.Log, level, step, format, args...)
}

func (r *run) build(ctx context.Context) (Info, error) {
	r.logf(LevelInfo, "", "Building template %s (%s), build %s", r.req.Name, r.req.TemplateID, r.req.BuildID)
	if err := r.base(ctx); err != nil {
		return Info{}, stepErr(StepBase, err)
	}
	for i, st := range r.req.Spec.Steps {
		n := fmt.Sprint(i + 1)
		r.logf(LevelInfo, n, "[%s/%d] %s", n, len(r.req.Spec.Steps), st.describe())
		if err := r.step(ctx, n, st); err != nil {
			return Info{}, stepErr(n, err)
		}
	}
	if err := r.finalize(ctx); err != nil {
		if r.ready != nil {
			r.dropReady(ctx, r.ready.ID)
		}
		return Info{}, stepErr(StepFinalize, err)
	}
	info, err := r.publish(ctx)
	if err != nil {
		if r.ready != nil {
			r.dropReady(ctx, r.ready.ID)
		}
		return Info{}, stepErr(StepFinalize, err)
	}
	r.logf(LevelInfo, "", "Template %s ready: build %s, %.1f MiB, in %s", r.req.Name, r.req.BuildID,
		float64(info.SizeBytes)/(1<<20), time.Since(r.started).Round(100*time.Millisecond))
	return info, nil
}

// stepErr wraps err as the failure of step unless it already is one.
func stepErr(step string, err error) error {
	var se *StepError
	if errors.As(err, &se) {
		if se.Step == "" {
			se.Step = step
		}
		return se
	}
	return &StepError{Step: step, ExitCode: -1, Err: err}
}

// describeCmd shortens a command for log lines.
func describeCmd(cmd string) string {
	cmd = firstLine(cmd)
	if len(cmd) > 200 {
		cmd = cmd[:200] + "…"
	}
	return strings.TrimSpace(cmd)
}

// firstLine is the first line of s (after a leading "set -e"), with " …"
// when more follow.
func firstLine(s string) string {
	s = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s), "set -e\n"))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}
