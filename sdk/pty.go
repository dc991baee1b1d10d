package sdk

import (
	"context"
	"maps"
	"time"

	"github.com/cubby-dev/cubby/internal/envdpb/process"
)

// PtySize is a terminal size in character cells.
type PtySize struct {
	Cols uint32
	Rows uint32
}

// PtyOptions configure Pty.Create.
type PtyOptions struct {
	// Envs are added to the terminal's environment (after TERM, LANG and
	// LC_ALL, which the SDK sets as the official SDKs do).
	Envs map[string]string
	// Cwd is the working directory; default the user's home.
	Cwd string
	// User runs the shell as this sandbox user; default the sandbox's default user.
	User string
	// Timeout is the terminal's lifetime: 0 means DefaultStreamTimeout (60 s),
	// NoTimeout means none.
	Timeout time.Duration
}

// Pty starts and drives interactive terminals: a login bash (`/bin/bash -i
// -l`) on a pseudo-terminal (docs/wire/envd.md §3.3).
type Pty struct {
	s *Sandbox
}

// Create starts a terminal of the given size; onData receives its raw output
// (on one goroutine; it must not block for long). The returned handle's
// Wait reports the shell's exit. ctx bounds the start only. Errors: those of
// Commands.Start.
func (p *Pty) Create(ctx context.Context, size PtySize, onData func([]byte), opts *PtyOptions) (*CommandHandle, error) {
	var o PtyOptions
	if opts != nil {
		o = *opts
	}
	envs := map[string]string{"TERM": "xterm-256color", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
	maps.Copy(envs, o.Envs)
	cfg := &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-i", "-l"}, Envs: envs}
	if o.Cwd != "" {
		cfg.Cwd = new(o.Cwd)
	}
	req := &process.StartRequest{Process: cfg, Pty: &process.PTY{Size: &process.PTY_Size{Cols: size.Cols, Rows: size.Rows}}}
	return p.s.startProcess(ctx, "create pty", o.User, o.Timeout, req, callbacks{pty: onData})
}

// Connect attaches to a running terminal by pid; onData receives its further
// output. timeout bounds the attachment (0: 60 s, NoTimeout: none). Errors:
// *NotFoundError for an unknown pid and those of Commands.Start.
func (p *Pty) Connect(ctx context.Context, pid uint32, onData func([]byte), timeout time.Duration) (*CommandHandle, error) {
	return p.s.connectProcess(ctx, pid, timeout, callbacks{pty: onData})
}

// SendInput writes data (keystrokes) to the terminal. Errors: *NotFoundError
// and the envd errors of Commands.Run.
func (p *Pty) SendInput(ctx context.Context, pid uint32, data []byte) error {
	_, err := unary(ctx, p.s, "send pty input", "", pidTarget(pid), p.s.proc.SendInput, &process.SendInputRequest{
		Process: pidSelector(pid),
		Input:   &process.ProcessInput{Input: &process.ProcessInput_Pty{Pty: data}},
	})
	return err
}

// Resize changes the terminal size (the Update RPC). Errors: *NotFoundError
// and the envd errors of Commands.Run.
func (p *Pty) Resize(ctx context.Context, pid uint32, size PtySize) error {
	_, err := unary(ctx, p.s, "resize pty", "", pidTarget(pid), p.s.proc.Update, &process.UpdateRequest{
		Process: pidSelector(pid),
		Pty:     &process.PTY{Size: &process.PTY_Size{Cols: size.Cols, Rows: size.Rows}},
	})
	return err
}

// Kill kills the terminal's shell with SIGKILL. Errors: *NotFoundError and
// the envd errors of Commands.Run.
func (p *Pty) Kill(ctx context.Context, pid uint32) error {
	return p.s.signal(ctx, pid, process.Signal_SIGNAL_SIGKILL)
}
