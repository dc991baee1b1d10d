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
	"time"

	"golang.org/x/sys/unix"
)

// childEnv marks the re-executed child so it does not become an init again.
const childEnv = "CUBBY_AGENT_CHILD"

// IsInit reports whether the current process must act as init: it is PID 1 and
// not already the re-executed child.
func IsInit() bool {
	return os.Getpid() == 1 && os.Getenv(childEnv) == ""
}

// Run re-executes the current binary with the same arguments as a child and
// supervises it. The child's stdout and stderr are a pipe Run relays, line by
// line, to its own stdout without ever blocking (see output), so neither the
// agent nor its init stalls or dies when the host reads slowly or not at all.
// SIGTERM/SIGINT/SIGHUP/SIGQUIT are forwarded and end supervision;
// a child that dies on its own (crashed, or could not create a thread while a fork
// bomb held every PID of the sandbox) is started again after a short backoff, so
// the sandbox stays reachable. Every process re-parented to PID 1 is reaped. Run
// returns the child's exit code (128+signal when it was killed by a signal) once
// the child exits after a termination signal.
func Run() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 1, fmt.Errorf("find own executable: %w", err)
	}
	CatchSIGPIPE()
	out, err := newOutput(unix.Stdout)
	if err != nil {
		return 1, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return 1, fmt.Errorf("agent output pipe: %w", err)
	}
	go relay(r, out)
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGCHLD)
	backoff := 50 * time.Millisecond
	stopping := false
	child, err := startChild(exe, w)
	for err != nil {
		out.Printf("cubby init: start agent: %v; retrying in %v", err, backoff)
		time.Sleep(backoff)
		backoff = min(backoff*2, 5*time.Second)
		child, err = startChild(exe, w)
	}
	started := time.Now()
	for sig := range sigs {
		if sig != unix.SIGCHLD {
			stopping = true
			_ = unix.Kill(child, sig.(unix.Signal))
			continue
		}
		code, done := reap(child)
		if !done {
			continue
		}
		if stopping {
			return code, nil
		}
		out.Printf("cubby init: agent exited with status %d; restarting it", code)
		if time.Since(started) > time.Minute {
			backoff = 50 * time.Millisecond
		}
		for {
			time.Sleep(backoff)
			backoff = min(backoff*2, 5*time.Second)
			if child, err = startChild(exe, w); err == nil {
				break
			}
			out.Printf("cubby init: restart agent: %v", err)
		}
		started = time.Now()
	}
	return 1, errors.New("signal channel closed")
}

// startChild starts the agent with stdout and stderr on output.
func startChild(exe string, output *os.File) (int, error) {
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, output, output
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	return cmd.Process.Pid, nil
}

// reap collects every exited process; it reports the child's exit code once the
// child itself has been collected.
func reap(child int) (int, bool) {
	code, done := 0, false
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return code, done
		}
		if pid != child {
			continue
		}
		done = true
		if ws.Signaled() {
			code = 128 + int(ws.Signal())
		} else {
			code = ws.ExitStatus()
		}
	}
}
