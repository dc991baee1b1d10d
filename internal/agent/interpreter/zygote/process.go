package zygote

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// process is a kernel forked by the server: not our child, so it is watched
// through a pidfd (readable once the process has exited; immune to pid reuse).
type process struct {
	pid  int
	fd   int
	f    *os.File
	done chan struct{}
	err  error
}

// watchPidfd takes ownership of pidfd and watches it in the background.
func watchPidfd(pid, pidfd int) *process {
	unix.SetNonblock(pidfd, true)
	p := &process{pid: pid, fd: pidfd, f: os.NewFile(uintptr(pidfd), "pidfd:"+strconv.Itoa(pid)),
		done: make(chan struct{})}
	go p.watch()
	return p
}

// Pid returns the kernel's pid (also its process group and session id).
func (p *process) Pid() int { return p.pid }

// Done is closed once the kernel has exited.
func (p *process) Done() <-chan struct{} { return p.done }

// Err reports the exit status when it could still be read before the server
// reaped the kernel; nil otherwise.
func (p *process) Err() error { return p.err }

// kill sends SIGKILL through the pidfd.
func (p *process) kill() { unix.PidfdSendSignal(p.fd, unix.SIGKILL, nil, 0) }

func (p *process) watch() {
	readable := func(fd uintptr) bool {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	}
	rc, err := p.f.SyscallConn()
	if err == nil {
		err = rc.Read(readable) // parks on the runtime poller, no thread held
	}
	if err != nil { // not pollable here: block a thread instead
		for {
			n, perr := unix.Poll([]unix.PollFd{{Fd: int32(p.fd), Events: unix.POLLIN}}, -1)
			if n > 0 || (perr != nil && perr != unix.EINTR) {
				break
			}
		}
	}
	p.err = p.exitStatus()
	p.f.Close()
	close(p.done)
}

// exitStatus reads the zombie's exit code from /proc/<pid>/stat (field 52),
// trusting it only if the pidfd still reaches the process afterwards (so the
// pid was not reaped and reused in between).
func (p *process) exitStatus() error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if err != nil {
		return nil
	}
	if unix.PidfdSendSignal(p.fd, 0, nil, 0) != nil {
		return nil
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return nil
	}
	f := strings.Fields(string(b[i+1:]))
	const exitCodeField = 52 - 3 // fields after "pid (comm)" start at field 3
	if len(f) <= exitCodeField {
		return nil
	}
	code, err := strconv.Atoi(f[exitCodeField])
	if err != nil {
		return nil
	}
	ws := syscall.WaitStatus(code)
	switch {
	case ws.Signaled():
		return SignalError{Sig: ws.Signal()}
	case ws.Exited() && ws.ExitStatus() != 0:
		return fmt.Errorf("exit status %d", ws.ExitStatus())
	}
	return nil
}

// SignalError is Process.Err of a kernel ended by a signal ("signal: killed").
type SignalError struct {
	Sig syscall.Signal
}

// Error reads like os.ProcessState's "signal: <name>".
func (e SignalError) Error() string { return fmt.Sprintf("signal: %v", e.Sig) }

// Signal returns the signal that ended the process.
func (e SignalError) Signal() syscall.Signal { return e.Sig }
