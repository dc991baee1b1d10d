package jupyter

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// ErrOutOfMemory: the kernel process was killed by the OOM killer of its
// memory cgroup while an execution ran. Errors wrapping it also wrap
// ErrKernelDied; errors.As with *OOMError gives the limit.
var ErrOutOfMemory = errors.New("killed by the out-of-memory killer")

// OOMCounter reads the out-of-memory facts of the memory cgroup a kernel runs
// in (for example *cgroups.Memory). Set it in Options.OOM.
type OOMCounter interface {
	// OOMKills returns how many processes the cgroup's OOM killer has killed so far.
	OOMKills() (uint64, error)
	// MemoryLimit returns the cgroup's memory limit in bytes, 0 = unlimited.
	MemoryLimit() (uint64, error)
}

// OOMError is the error of an execution whose kernel the OOM killer killed
// (process ended by SIGKILL while the cgroup's oom_kill counter rose). It
// matches both ErrOutOfMemory and ErrKernelDied with errors.Is.
type OOMError struct {
	LimitBytes uint64 // memory limit of the kernel's cgroup in bytes; 0 = unknown/unlimited
}

// Error reads "kernel died: killed by the out-of-memory killer (memory limit N MiB)".
func (e *OOMError) Error() string {
	if e.LimitBytes == 0 {
		return fmt.Sprintf("%v: %v", ErrKernelDied, ErrOutOfMemory)
	}
	return fmt.Sprintf("%v: %v (memory limit %d MiB)", ErrKernelDied, ErrOutOfMemory, e.LimitBytes>>20)
}

// Is matches ErrOutOfMemory and ErrKernelDied.
func (e *OOMError) Is(target error) bool {
	return target == ErrOutOfMemory || target == ErrKernelDied
}

// oomSettle bounds how long a SIGKILLed kernel's exit waits for the cgroup's
// counter to show the kill (the kernel counts it just after sending the signal).
const oomSettle = 50 * time.Millisecond

// oomWatch holds the counter read before an execution started.
type oomWatch struct {
	c      OOMCounter
	before uint64
}

// startOOMWatch reads the counter; nil when there is none or it cannot be read.
func startOOMWatch(c OOMCounter) *oomWatch {
	if c == nil {
		return nil
	}
	n, err := c.OOMKills()
	if err != nil {
		return nil
	}
	return &oomWatch{c: c, before: n}
}

// explain returns an *OOMError for a kernel that died by SIGKILL, or of a cause
// it cannot know (sig 0: a fork-server child is reaped by its parent, which may
// not tell), while the counter rose; else err unchanged.
func (w *oomWatch) explain(err error, sig syscall.Signal) error {
	if w == nil || (sig != syscall.SIGKILL && sig != 0) || !errors.Is(err, ErrKernelDied) {
		return err
	}
	deadline := time.Now().Add(oomSettle)
	for {
		n, rerr := w.c.OOMKills()
		if rerr != nil {
			return err
		}
		if n > w.before {
			limit, _ := w.c.MemoryLimit()
			return &OOMError{LimitBytes: limit}
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exitSignal returns the signal that ended a process whose Process.Err is err
// (0 = not ended by a signal, or unknown): *exec.ExitError, or any error with
// a Signal() syscall.Signal method (a Launcher's own process errors).
func exitSignal(err error) syscall.Signal {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal()
		}
		return 0
	}
	var s interface{ Signal() syscall.Signal }
	if errors.As(err, &s) {
		return s.Signal()
	}
	return 0
}
