package userns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cubby-dev/cubby/internal/nsfs"
)

// HelperCommand is the first argument that makes a binary run HelperMain
// instead of its own main (the cubby binary and this package's tests check it
// before anything else).
const HelperCommand = "userns-helper"

// helperTimeout bounds one Create: two short-lived helper processes.
const helperTimeout = 30 * time.Second

// Creator makes user namespaces (see Create). Exe is the binary whose main
// runs HelperMain when its first argument is HelperCommand; it is opened once
// and executed through the descriptor, so the helpers (unprivileged) need no
// search permission on its directories.
type Creator struct {
	exe *os.File
}

// NewCreator opens exe (e.g. os.Executable()) for Create. Close releases it.
func NewCreator(exe string) (*Creator, error) {
	f, err := os.Open(exe)
	if err != nil {
		return nil, fmt.Errorf("user namespaces: open helper binary: %w", err)
	}
	return &Creator{exe: f}, nil
}

// Close releases the helper binary.
func (c *Creator) Close() error { return c.exe.Close() }

// Create makes a user namespace mapping r (uids and gids 0..r.Size-1 inside
// to r.HostID.. on the host) and owned by host uid r.HostID, with a network
// namespace owned by it, and bind-mounts their nsfs files at usernsPath and
// netnsPath (created as empty files; they must not exist). The mounts keep
// both namespaces alive until removed with Remove. A helper running as
// r.HostID clones the namespaces; this process (root in the initial user
// namespace) writes the maps and checks the owner. On error nothing is left
// mounted and no helper runs.
func (c *Creator) Create(ctx context.Context, r Range, usernsPath, netnsPath string) (err error) {
	if err := r.validate(); err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, helperTimeout)
	defer cancel()
	h, err := c.start(ctx, r.HostID)
	if err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	var bound []string
	defer func() {
		if werr := h.finish(); err == nil && werr != nil {
			err = fmt.Errorf("create user namespace: %w", werr)
		}
		for _, p := range bound {
			if err != nil {
				err = errors.Join(err, nsfs.Remove(p))
			}
		}
	}()
	proc := "/proc/" + strconv.Itoa(h.pid)
	if err := writeMaps(proc, r); err != nil {
		return fmt.Errorf("create user namespace: %w", err)
	}
	if owner, err := Owner(proc + "/ns/user"); err != nil || owner != r.HostID {
		return fmt.Errorf("create user namespace: owned by %d, want %d: %v", owner, r.HostID, err)
	}
	for _, b := range [][2]string{{proc + "/ns/user", usernsPath}, {proc + "/ns/net", netnsPath}} {
		if err := nsfs.Bind(b[0], b[1]); err != nil {
			return fmt.Errorf("create namespaces: %w", err)
		}
		bound = append(bound, b[1])
	}
	return nil
}

// helper is a running "spawn" helper and the pid of the process it cloned
// into the new namespaces.
type helper struct {
	cmd   *exec.Cmd
	stdin io.Closer
	pid   int
}

// start runs the spawn helper as uid and gid id (no supplementary groups) and
// reads the pid of its child in the new namespaces.
func (c *Creator) start(ctx context.Context, id uint32) (*helper, error) {
	cmd := exec.CommandContext(ctx, "/proc/self/fd/3", HelperCommand, "spawn")
	cmd.ExtraFiles = []*os.File{c.exe}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: id, Gid: id, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start helper: %w", err)
	}
	h := &helper{cmd: cmd, stdin: stdin}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err == nil {
		h.pid, err = strconv.Atoi(strings.TrimSpace(line))
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("read helper child pid: %w", err), h.finish())
	}
	return h, nil
}

// finish lets the helper's child exit (EOF on its stdin) and waits for both.
func (h *helper) finish() error {
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		return fmt.Errorf("helper: %w", err)
	}
	return nil
}

// writeMaps writes r as the uid and gid map of the process at proc.
func writeMaps(proc string, r Range) error {
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(proc+"/"+f, []byte(r.String()+"\n"), 0); err != nil {
			return fmt.Errorf("write %s: %w", f, err)
		}
	}
	return nil
}

// Remove unmounts and removes a namespace file made by Create (nsfs.Remove).
func Remove(path string) error { return nsfs.Remove(path) }

// HelperMain runs the helper processes of Create; args follow HelperCommand.
// "spawn" (running as the range's host uid) starts "hold" in a new user and
// network namespace, prints its pid and waits for it; "hold" waits for EOF on
// stdin. It returns the exit code.
func HelperMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "userns helper: want spawn or hold")
		return 2
	}
	switch args[0] {
	case "hold":
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	case "spawn":
		if err := spawn(); err != nil {
			fmt.Fprintln(os.Stderr, "userns helper:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "userns helper: unknown mode %q\n", args[0])
	return 2
}

// spawn clones "hold" into new user and network namespaces: the clone runs
// with this process's effective uid, which becomes the namespace's owner.
func spawn() error {
	cmd := exec.Command("/proc/self/exe", HelperCommand, "hold")
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		Pdeathsig:  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("clone namespaces: %w", err)
	}
	if _, err := fmt.Println(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
	}
	return cmd.Wait()
}
