// Package runc implements runtime.Runtime by driving the runc CLI (OCI runtime
// command line: create, start, state, list, kill, delete, pause, resume) with the
// cgroupfs cgroup manager and a private state root.
package runc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/ocicli"
)

// PidFileName is the file runc writes the init pid into, inside the bundle.
const PidFileName = "init.pid"

// cleanupTimeout bounds the clean-up after a failed Start.
const cleanupTimeout = 10 * time.Second

// Runtime drives one runc binary with one state root. It is safe for concurrent
// use on distinct container IDs.
type Runtime struct {
	cli  ocicli.CLI
	root string
	log  *slog.Logger
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a Runtime that runs binary (e.g. "/usr/sbin/runc") with
// `--root stateRoot` (a directory runc creates; preferably on tmpfs such as /run).
func New(binary, stateRoot string, log *slog.Logger) *Runtime {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cli := ocicli.CLI{Name: Name, Binary: binary, Flags: []string{"--root", stateRoot},
		RunFlags: []string{"--log-format", "json"}, NotFound: "does not exist"}
	return &Runtime{cli: cli, root: stateRoot, log: log}
}

// Name is the runtime's name, as Runtime.Name reports it.
const Name = "runc"

// Name returns "runc".
func (r *Runtime) Name() string { return Name }

// State parses `runc state id`. Unknown IDs return an error wrapping runtime.ErrNotFound.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	return r.cli.State(ctx, id)
}

// List parses `runc list --format json`: every container in the state root,
// none while the state root does not exist (runc 1.2 and later fail then).
func (r *Runtime) List(ctx context.Context) ([]runtime.State, error) {
	if _, err := os.Stat(r.root); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return r.cli.List(ctx)
}

// Start runs `runc create --bundle bundle --pid-file bundle/init.pid id` with the
// container's stdin on /dev/null and its stdout and stderr on output, then
// `runc start id`. On error the half-created container is removed and the error
// carries runc's message.
func (r *Runtime) Start(ctx context.Context, id, bundle string, output *os.File) error {
	if err := r.cli.CheckID(id); err != nil {
		return err
	}
	err := r.cli.Launch(ctx, id, output, "create", "--bundle", bundle, "--pid-file", filepath.Join(bundle, PidFileName), id)
	if err != nil {
		r.cleanup(ctx, id)
		return err
	}
	if _, err := r.cli.Run(ctx, "start", id); err != nil {
		r.cleanup(ctx, id)
		return err
	}
	r.log.Debug("container started", "id", id, "bundle", bundle)
	return nil
}

// cleanup removes a container left by a failed Start, ignoring errors (logged).
func (r *Runtime) cleanup(ctx context.Context, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := r.Kill(ctx, id); err != nil {
		r.log.Warn("clean up failed container", "id", id, "err", err)
	}
}

// Kill sends SIGKILL to the container (`runc kill`, with --all when paused so the
// frozen tasks are signalled and thawed), waits on a pidfd until the init process has
// exited, and deletes the container (`runc delete`, falling back to `delete --force`).
// Unknown IDs return nil.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	st, found, err := r.cli.Lookup(ctx, id)
	if err != nil {
		return fmt.Errorf("runc kill %s: %w", id, err)
	}
	if !found {
		return nil
	}
	if st.Status != runtime.StatusStopped && st.Pid > 0 {
		if err := r.killAndWait(ctx, st); err != nil {
			return err
		}
	}
	return r.delete(ctx, id)
}

func (r *Runtime) killAndWait(ctx context.Context, st runtime.State) error {
	pidfd, err := ocicli.OpenPidfd(st.Pid)
	if err != nil {
		return fmt.Errorf("runc kill %s: pidfd_open %d: %w", st.ID, st.Pid, err)
	}
	if pidfd < 0 {
		return nil // already gone
	}
	defer unix.Close(pidfd)
	args := []string{"kill", st.ID, "KILL"}
	if st.Status == runtime.StatusPaused {
		args = []string{"kill", "--all", st.ID, "KILL"}
	}
	if _, err := r.cli.Run(ctx, args...); err != nil {
		if errors.Is(err, runtime.ErrNotFound) {
			return nil
		}
		// The container may have stopped on its own in between; the wait decides.
		r.log.Debug("runc kill", "id", st.ID, "err", err)
	}
	if st.Status == runtime.StatusPaused {
		// A v1-frozen task dies only once thawed; resume is a no-op if already thawed.
		_, _ = r.cli.Run(ctx, "resume", st.ID)
	}
	if err := ocicli.WaitPidfd(ctx, pidfd); err != nil {
		return fmt.Errorf("runc kill %s: wait for pid %d: %w", st.ID, st.Pid, err)
	}
	return nil
}

func (r *Runtime) delete(ctx context.Context, id string) error {
	_, err := r.cli.Run(ctx, "delete", id)
	if err == nil || errors.Is(err, runtime.ErrNotFound) {
		return nil
	}
	r.log.Debug("runc delete failed, forcing", "id", id, "err", err)
	if _, ferr := r.cli.Run(ctx, "delete", "--force", id); ferr != nil && !errors.Is(ferr, runtime.ErrNotFound) {
		return fmt.Errorf("runc kill %s: %w (after %w)", id, ferr, err)
	}
	return nil
}

// Pause freezes the container with `runc pause` (cgroup freezer).
func (r *Runtime) Pause(ctx context.Context, id string) error {
	return r.cli.OnContainer(ctx, "pause", id)
}

// Resume thaws the container with `runc resume`.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	return r.cli.OnContainer(ctx, "resume", id)
}

// EscapeFixed reports whether version, the output of `runc --version` (first
// line "runc version X.Y.Z[...]"), names a release carrying the fixes of the
// November 2025 container escapes CVE-2025-31133, CVE-2025-52565 and
// CVE-2025-52881: 1.2.8, 1.3.3, 1.4.0 and later. Errors: no version number in
// the output.
func EscapeFixed(version string) (bool, error) {
	first, _, _ := strings.Cut(version, "\n")
	f := strings.Fields(first)
	if len(f) < 3 || f[0] != "runc" || f[1] != "version" {
		return false, fmt.Errorf("runc version: unexpected output %q", first)
	}
	var v [3]int
	for i, part := range strings.SplitN(f[2], ".", 3) {
		digits := part
		if j := strings.IndexFunc(part, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			digits = part[:j]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			return false, fmt.Errorf("runc version: unexpected number %q", f[2])
		}
		v[i] = n
	}
	switch {
	case v[0] != 1:
		return v[0] > 1, nil
	case v[1] == 2:
		return v[2] >= 8, nil
	case v[1] == 3:
		return v[2] >= 3, nil
	}
	return v[1] >= 4, nil
}
