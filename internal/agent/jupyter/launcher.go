package jupyter

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// Launcher starts kernel processes for a Kernel in place of exec'ing the
// kernelspec argv, for example a Python fork server (package
// internal/agent/interpreter/zygote). Set it in Options.Launcher; a Kernel falls back to exec when Launch
// fails or the launched kernel dies or fails its handshake before it is ready.
type Launcher interface {
	// Launch starts the kernel req describes and returns its process, which
	// must lead its own process group (interrupts and kills go to -pid) and
	// read req.ConnectionFile. It returns once the process exists, not once
	// the kernel is ready. Errors mean nothing was started.
	Launch(ctx context.Context, req LaunchRequest) (Process, error)
}

// LaunchRequest describes one kernel process to start.
type LaunchRequest struct {
	// Spec is the kernelspec the kernel comes from.
	Spec *KernelSpec
	// Argv is the spec's argv with {connection_file} and {resource_dir}
	// substituted, followed by Options.ExtraArgs.
	Argv []string
	// ConnectionFile is the path of the kernel's 0600 connection file.
	ConnectionFile string
	// Dir is the working directory ("" = the launcher's).
	Dir string
	// Env is the complete environment ("KEY=value"), spec env included.
	Env []string
	// Credential is the uid/gid/groups to run as (nil = the launcher's own).
	Credential *syscall.Credential
	// Output receives the kernel's stdout and stderr. The launcher must not
	// close it; the caller closes its copy once Launch returned.
	Output *os.File
}

// Process is a kernel process started by a Launcher.
type Process interface {
	// Pid is the process id, which is also its process group id.
	Pid() int
	// Done is closed once the process has exited.
	Done() <-chan struct{}
	// Err describes how the process exited (nil = status 0 or unknown); valid
	// after Done is closed.
	Err() error
}

// execProcess is a kernel started with exec, our own child.
type execProcess struct {
	pid  int
	done chan struct{}
	err  error
}

func (p *execProcess) Pid() int              { return p.pid }
func (p *execProcess) Done() <-chan struct{} { return p.done }
func (p *execProcess) Err() error            { return p.err }

// execLaunch starts req.Argv as a child in its own process group (the cold path).
func execLaunch(req LaunchRequest) (Process, error) {
	bin, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, req.Argv[1:]...)
	cmd.Args[0] = req.Argv[0]
	cmd.Dir, cmd.Env = req.Dir, req.Env
	cmd.Stdout, cmd.Stderr = req.Output, req.Output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: req.Credential}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("exec %s: %w", req.Argv[0], err)
	}
	p := &execProcess{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}
