// Package initproc lets the agent run as PID 1 of a sandbox's PID namespace.
//
// PID 1 has two duties an ordinary daemon lacks: it must reap every orphaned
// process re-parented to it (or zombies accumulate), and the kernel gives it no
// default signal handlers. Reaping with wait4(-1) would race with os/exec's own
// Wait in the agent, so PID 1 stays a minimal init: it re-executes the binary as
// its only child, forwards termination signals to it, reaps everything, and exits
// with the child's status.
package initproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"

	"golang.org/x/sys/unix"
)

// childEnv marks the re-executed child so it does not become an init again.
const childEnv = "CUBBY_AGENT_CHILD"

// IsInit reports whether the current process must act as init: it is PID 1 and
// not already the re-executed child.
func IsInit() bool {
	return os.Getpid() == 1 && os.Getenv(childEnv) == ""
}

// Run re-executes the current binary with the same arguments as a child, forwards
// SIGTERM/SIGINT/SIGHUP/SIGQUIT to it, reaps every process until the child exits,
// and returns the child's exit code (128+signal when it was killed by a signal).
func Run() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 1, fmt.Errorf("find own executable: %w", err)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGCHLD)
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("start agent child: %w", err)
	}
	child := cmd.Process.Pid
	for sig := range sigs {
		if sig != unix.SIGCHLD {
			_ = unix.Kill(child, sig.(unix.Signal))
			continue
		}
		if code, done := reap(child); done {
			return code, nil
		}
	}
	return 1, errors.New("signal channel closed")
}

// reap collects every exited process; it reports the child's exit code once the
// child itself has been collected.
func reap(child int) (int, bool) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return 0, false
		}
		if pid != child {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal()), true
		}
		return ws.ExitStatus(), true
	}
}
