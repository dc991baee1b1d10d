// Package runc implements runtime.Runtime by driving the runc CLI (OCI runtime
// command line: create, start, state, list, kill, delete, pause, resume) with the
// cgroupfs cgroup manager and a private state root.
package runc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/runtime"
)

// PidFileName is the file runc writes the init pid into, inside the bundle.
const PidFileName = "init.pid"

// cleanupTimeout bounds the clean-up after a failed Start.
const cleanupTimeout = 10 * time.Second

// validID matches the container IDs runc accepts (and no leading '-').
var validID = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]*$`)

// Runtime drives one runc binary with one state root. It is safe for concurrent
// use on distinct container IDs.
type Runtime struct {
	binary string
	root   string
	log    *slog.Logger
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a Runtime that runs binary (e.g. "/usr/sbin/runc") with
// `--root stateRoot` (a directory runc creates; preferably on tmpfs such as /run).
func New(binary, stateRoot string, log *slog.Logger) *Runtime {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runtime{binary: binary, root: stateRoot, log: log}
}

// Name returns "runc".
func (r *Runtime) Name() string { return "runc" }

// Start runs `runc create --bundle bundle --pid-file bundle/init.pid id` with the
// container's stdin on /dev/null and its stdout and stderr appended to logPath, then
// `runc start id`. On error the half-created container is removed and the error
// carries runc's message.
func (r *Runtime) Start(ctx context.Context, id, bundle, logPath string) error {
	if err := checkID(id); err != nil {
		return err
	}
	out, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("runc start %s: open log: %w", id, err)
	}
	defer out.Close()
	if err := r.create(ctx, id, bundle, out); err != nil {
		r.cleanup(ctx, id)
		return err
	}
	if _, err := r.run(ctx, "start", id); err != nil {
		r.cleanup(ctx, id)
		return err
	}
	r.log.Debug("container started", "id", id, "bundle", bundle)
	return nil
}

// create runs `runc create`. The container inherits runc's stdio, so runc's own
// messages are read from a separate --log file.
func (r *Runtime) create(ctx context.Context, id, bundle string, out *os.File) error {
	logf, err := os.CreateTemp("", "runc-create-*.log")
	if err != nil {
		return fmt.Errorf("runc create %s: %w", id, err)
	}
	logf.Close()
	defer os.Remove(logf.Name())
	cmd := exec.CommandContext(ctx, r.binary, "--root", r.root, "--log", logf.Name(), "--log-format", "json",
		"create", "--bundle", bundle, "--pid-file", filepath.Join(bundle, PidFileName), id)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(logf.Name())
		return wrap("create "+id, msg, err)
	}
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

// stateJSON is the output of `runc state` and the elements of `runc list --format json`.
type stateJSON struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

func (s stateJSON) state() runtime.State {
	st := runtime.State{ID: s.ID, Status: runtime.Status(s.Status), Pid: s.Pid, Bundle: s.Bundle}
	if st.Status == runtime.StatusStopped {
		st.Pid = 0
	}
	return st
}

// State parses `runc state id`. Unknown IDs return an error wrapping runtime.ErrNotFound.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	if err := checkID(id); err != nil {
		return runtime.State{}, err
	}
	out, err := r.run(ctx, "state", id)
	if err != nil {
		return runtime.State{}, err
	}
	var s stateJSON
	if err := json.Unmarshal(out, &s); err != nil {
		return runtime.State{}, fmt.Errorf("runc state %s: parse: %w", id, err)
	}
	return s.state(), nil
}

// List parses `runc list --format json`: every container in the state root.
func (r *Runtime) List(ctx context.Context) ([]runtime.State, error) {
	out, err := r.run(ctx, "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var ss []stateJSON
	if err := json.Unmarshal(out, &ss); err != nil {
		return nil, fmt.Errorf("runc list: parse: %w", err)
	}
	states := make([]runtime.State, 0, len(ss))
	for _, s := range ss {
		states = append(states, s.state())
	}
	return states, nil
}

// Kill sends SIGKILL to the container (`runc kill`, with --all when paused so the
// frozen tasks are signalled and thawed), waits on a pidfd until the init process has
// exited, and deletes the container (`runc delete`, falling back to `delete --force`).
// Unknown IDs return nil.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	st, err := r.State(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("runc kill %s: %w", id, err)
	}
	if st.Status != runtime.StatusStopped && st.Pid > 0 {
		if err := r.killAndWait(ctx, st); err != nil {
			return err
		}
	}
	return r.delete(ctx, id)
}

func (r *Runtime) killAndWait(ctx context.Context, st runtime.State) error {
	pidfd, err := unix.PidfdOpen(st.Pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil // already gone
	}
	if err != nil {
		return fmt.Errorf("runc kill %s: pidfd_open %d: %w", st.ID, st.Pid, err)
	}
	defer unix.Close(pidfd)
	args := []string{"kill", st.ID, "KILL"}
	if st.Status == runtime.StatusPaused {
		args = []string{"kill", "--all", st.ID, "KILL"}
	}
	if _, err := r.run(ctx, args...); err != nil {
		if errors.Is(err, runtime.ErrNotFound) {
			return nil
		}
		// The container may have stopped on its own in between; the wait decides.
		r.log.Debug("runc kill", "id", st.ID, "err", err)
	}
	if st.Status == runtime.StatusPaused {
		// A v1-frozen task dies only once thawed; resume is a no-op if already thawed.
		_, _ = r.run(ctx, "resume", st.ID)
	}
	if err := waitPidfd(ctx, pidfd); err != nil {
		return fmt.Errorf("runc kill %s: wait for pid %d: %w", st.ID, st.Pid, err)
	}
	return nil
}

// waitPidfd blocks until the process behind pidfd has exited or ctx is done.
func waitPidfd(ctx context.Context, pidfd int) error {
	for {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 50)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (r *Runtime) delete(ctx context.Context, id string) error {
	_, err := r.run(ctx, "delete", id)
	if err == nil || errors.Is(err, runtime.ErrNotFound) {
		return nil
	}
	r.log.Debug("runc delete failed, forcing", "id", id, "err", err)
	if _, ferr := r.run(ctx, "delete", "--force", id); ferr != nil && !errors.Is(ferr, runtime.ErrNotFound) {
		return fmt.Errorf("runc kill %s: %w (after %w)", id, ferr, err)
	}
	return nil
}

// Pause freezes the container with `runc pause` (cgroup freezer).
func (r *Runtime) Pause(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := r.run(ctx, "pause", id)
	return err
}

// Resume thaws the container with `runc resume`.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := r.run(ctx, "resume", id)
	return err
}

// run executes runc with the state root and JSON logging and returns its stdout.
// Errors carry runc's message and wrap runtime.ErrNotFound for unknown containers.
func (r *Runtime) run(ctx context.Context, args ...string) ([]byte, error) {
	full := append([]string{"--root", r.root, "--log-format", "json"}, args...)
	cmd := exec.CommandContext(ctx, r.binary, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, wrap(strings.Join(args, " "), stderr.Bytes(), err)
	}
	return stdout.Bytes(), nil
}

// wrap builds the error of a failed runc command from its JSON log lines.
func wrap(command string, log []byte, err error) error {
	msg := messages(log)
	if strings.Contains(msg, "does not exist") {
		return fmt.Errorf("runc %s: %s: %w", command, msg, runtime.ErrNotFound)
	}
	return fmt.Errorf("runc %s: %s: %w", command, msg, err)
}

// messages extracts the "msg" of runc's JSON log lines at level error or above,
// or returns the raw text when it is not JSON.
func messages(log []byte) string {
	var msgs []string
	for _, line := range bytes.Split(bytes.TrimSpace(log), []byte("\n")) {
		var e struct{ Level, Msg string }
		if json.Unmarshal(line, &e) != nil {
			if len(bytes.TrimSpace(line)) > 0 {
				msgs = append(msgs, string(bytes.TrimSpace(line)))
			}
			continue
		}
		if e.Level == "error" || e.Level == "fatal" || e.Level == "panic" {
			msgs = append(msgs, e.Msg)
		}
	}
	if len(msgs) == 0 {
		return "no message"
	}
	return strings.Join(msgs, "; ")
}

func checkID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("runc: invalid container id %q", id)
	}
	return nil
}
