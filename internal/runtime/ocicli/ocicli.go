// Package ocicli drives an OCI runtime command line (runc, gVisor's runsc): it runs
// the binary with its global flags, turns a failed command's stderr or JSON log into
// an error (wrapping runtime.ErrNotFound for unknown containers), parses `state` and
// `list --format json` (OCI runtime spec "state"), validates container IDs and waits
// for a process to exit through a pidfd.
package ocicli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/runtime"
)

// validID matches the container IDs runc and runsc accept (and no leading '-').
var validID = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+-]*$`)

// CLI is one OCI runtime binary with the flags given to all its commands. The
// zero value is not usable; fill every field but RunFlags. A CLI is safe for
// concurrent use.
type CLI struct {
	// Name prefixes every error ("runc", "runsc").
	Name string
	// Binary is the path of the executable, e.g. "/usr/sbin/runc".
	Binary string
	// Flags are the global flags of every command, e.g. {"--root", stateRoot}.
	Flags []string
	// RunFlags are global flags added, after Flags, to the commands of Run only
	// (not Launch), e.g. {"--log-format", "json"} for JSON lines on stderr.
	RunFlags []string
	// NotFound is the text of an error message that means "no such container"
	// (e.g. "does not exist"); such errors wrap runtime.ErrNotFound.
	NotFound string
}

// Run executes the binary with Flags, RunFlags and args, stdin on /dev/null, and
// returns its stdout. Errors are "<Name> <args>: <messages of stderr>: <cause>",
// the cause being runtime.ErrNotFound when the message contains NotFound and the
// *exec.ExitError (or start error) otherwise.
func (c *CLI) Run(ctx context.Context, args ...string) ([]byte, error) {
	full := append(append(append([]string{}, c.Flags...), c.RunFlags...), args...)
	cmd := exec.CommandContext(ctx, c.Binary, full...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, c.wrap(strings.Join(args, " "), stderr.Bytes(), err)
	}
	return stdout.Bytes(), nil
}

// Launch executes a command that starts container processes (create, restore) for
// container id: they inherit the command's stdout and stderr, both output (the
// processes get its descriptor and Launch does not wait for them). The runtime's
// own messages go to a pipe (`--log /proc/self/fd/3 --log-format json`, after
// Flags) read while the command runs, for the error; once the command has exited
// the pipe is closed, so processes that keep the log they were given (runsc's
// sandbox and gofer) can no longer write anything to the host. args[0] is the
// command. Errors are "<Name> <args[0]> <id>: <messages>: <cause>" as for Run.
func (c *CLI) Launch(ctx context.Context, id string, output *os.File, args ...string) error {
	lp, err := newLogPipe()
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", c.Name, args[0], id, err)
	}
	full := append(append([]string{}, c.Flags...), "--log", "/proc/self/fd/3", "--log-format", "json")
	cmd := exec.CommandContext(ctx, c.Binary, append(full, args...)...)
	cmd.Stdout, cmd.Stderr = output, output
	cmd.ExtraFiles = []*os.File{lp.w}
	err = cmd.Start()
	lp.started()
	if err == nil {
		err = cmd.Wait()
	}
	msg := lp.finish()
	if err != nil {
		return c.wrap(args[0]+" "+id, msg, err)
	}
	return nil
}

// OnContainer checks id and runs `<command> id` (e.g. pause, resume), discarding
// stdout. Errors as for Run.
func (c *CLI) OnContainer(ctx context.Context, command, id string) error {
	if err := c.CheckID(id); err != nil {
		return err
	}
	_, err := c.Run(ctx, command, id)
	return err
}

// CheckID returns an error "<Name>: invalid container id" unless id is made of
// letters, digits and "_.+-" and does not start with '.', '+' or '-'.
func (c *CLI) CheckID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("%s: invalid container id %q", c.Name, id)
	}
	return nil
}

// stateJSON is the output of `state` and the elements of `list --format json`
// (OCI runtime spec "state": id, status, pid, bundle).
type stateJSON struct {
	ID     string `json:"id"`
	Pid    int    `json:"pid"`
	Status string `json:"status"`
	Bundle string `json:"bundle"`
}

func (s stateJSON) state() runtime.State {
	st := runtime.State{ID: s.ID, Status: runtime.Status(s.Status), Pid: s.Pid, Bundle: s.Bundle}
	if st.Status == runtime.StatusStopped || st.Pid < 0 {
		st.Pid = 0
	}
	return st
}

// State parses `state id`; Pid is 0 when the container is stopped. Unknown IDs
// return an error wrapping runtime.ErrNotFound.
func (c *CLI) State(ctx context.Context, id string) (runtime.State, error) {
	if err := c.CheckID(id); err != nil {
		return runtime.State{}, err
	}
	out, err := c.Run(ctx, "state", id)
	if err != nil {
		return runtime.State{}, err
	}
	var s stateJSON
	if err := json.Unmarshal(out, &s); err != nil {
		return runtime.State{}, fmt.Errorf("%s state %s: parse: %w", c.Name, id, err)
	}
	return s.state(), nil
}

// Lookup is State that reports an unknown container as found false and no error.
func (c *CLI) Lookup(ctx context.Context, id string) (st runtime.State, found bool, err error) {
	st, err = c.State(ctx, id)
	if errors.Is(err, runtime.ErrNotFound) {
		return runtime.State{}, false, nil
	}
	return st, err == nil, err
}

// List parses `list --format json`: every container of the state root.
func (c *CLI) List(ctx context.Context) ([]runtime.State, error) {
	out, err := c.Run(ctx, "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var ss []stateJSON
	if err := json.Unmarshal(out, &ss); err != nil {
		return nil, fmt.Errorf("%s list: parse: %w", c.Name, err)
	}
	states := make([]runtime.State, 0, len(ss))
	for _, s := range ss {
		states = append(states, s.state())
	}
	return states, nil
}

// wrap builds the error of a failed command from its output or JSON log.
func (c *CLI) wrap(command string, log []byte, err error) error {
	msg := Messages(log)
	if strings.Contains(msg, c.NotFound) {
		return fmt.Errorf("%s %s: %s: %w", c.Name, command, msg, runtime.ErrNotFound)
	}
	return fmt.Errorf("%s %s: %s: %w", c.Name, command, msg, err)
}

// Messages extracts the "msg" of the JSON log lines ({"level":…,"msg":…}) at
// level error, fatal or panic, and keeps the lines that are not JSON as they are
// (trimmed), joined with "; "; "no message" when there is none.
func Messages(log []byte) string {
	var msgs []string
	for _, line := range bytes.Split(bytes.TrimSpace(log), []byte("\n")) {
		var e struct{ Level, Msg string }
		if json.Unmarshal(line, &e) != nil {
			if s := strings.TrimSpace(string(line)); s != "" {
				msgs = append(msgs, s)
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

// OpenPidfd returns a pidfd (pidfd_open(2)) of process pid, to be closed with
// unix.Close, or -1 and no error when pid <= 0 or the process is gone (ESRCH).
func OpenPidfd(pid int) (int, error) {
	if pid <= 0 {
		return -1, nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return -1, nil
	}
	if err != nil {
		return -1, err
	}
	return fd, nil
}

// WaitPidfd blocks until the process behind pidfd has exited (polling it every
// 50 ms for ctx) or ctx is done, returning ctx's error then.
func WaitPidfd(ctx context.Context, pidfd int) error {
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
