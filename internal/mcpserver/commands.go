package mcpserver

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cubby-dev/cubby/sdk"
)

// Waits of run_command and command_output, seconds.
const (
	defaultCommandWait = 30
	maxCommandWait     = 600
)

// killSettle bounds how long command_kill waits to report the exit;
// attachSettle how long command_output waits for the end event of a process
// it attached to.
const (
	killSettle   = 3 * time.Second
	attachSettle = 500 * time.Millisecond
)

type runCommandArgs struct {
	Command     string            `json:"command" jsonschema:"Shell command line, run with bash -l -c."`
	Sandbox     string            `json:"sandbox,omitempty" jsonschema:"ID of the sandbox to run in. Default: this session's own sandbox."`
	Cwd         string            `json:"cwd,omitempty" jsonschema:"Working directory (must exist). Default: the user's home."`
	Envs        map[string]string `json:"envs,omitempty" jsonschema:"Environment variables for this command."`
	User        string            `json:"user,omitempty" jsonschema:"Sandbox user to run as: user (default) or root."`
	WaitSeconds int               `json:"wait_seconds,omitempty" jsonschema:"Wait this long for the command to finish (default 30, at most 600). A command still running then keeps running: its pid is returned for command_output and command_kill."`
}

type commandOutputArgs struct {
	PID int `json:"pid" jsonschema:"Process ID returned by run_command."`
	sandboxArg
	WaitSeconds int `json:"wait_seconds,omitempty" jsonschema:"Wait up to this long for the process to finish before answering (0, the default: answer at once; at most 600)."`
}

type commandKillArgs struct {
	PID int `json:"pid" jsonschema:"Process ID to kill (SIGKILL)."`
	sandboxArg
}

type commandResult struct {
	Sandbox   string `json:"sandbox"`
	PID       int    `json:"pid"`
	Running   bool   `json:"running" jsonschema:"The process is still running: poll it with command_output."`
	ExitCode  *int   `json:"exit_code,omitempty" jsonschema:"Exit status once the process ended."`
	Error     string `json:"error,omitempty" jsonschema:"How the process ended when not cleanly (e.g. signal: killed)."`
	Stdout    string `json:"stdout" jsonschema:"Output not returned before (run_command: all of it so far)."`
	Stderr    string `json:"stderr"`
	Truncated bool   `json:"truncated"`
	Note      string `json:"note,omitempty"`
}

// proc is a command a session started or attached to: its unread output
// and, once it ended, how.
type proc struct {
	h      *sdk.CommandHandle
	stdout *clip
	stderr *clip
	done   chan struct{}

	mu     sync.Mutex
	report func(string) // progress of the tool call waiting on it; nil when none
	result commandResult
}

func newProc(limit int) *proc {
	return &proc{stdout: newClip(limit), stderr: newClip(limit), done: make(chan struct{})}
}

func (p *proc) onStdout(s string) { p.stdout.Write(s); p.progress(s) }
func (p *proc) onStderr(s string) { p.stderr.Write(s); p.progress(s) }

func (p *proc) progress(s string) {
	p.mu.Lock()
	f := p.report
	p.mu.Unlock()
	if f != nil {
		f(s)
	}
}

// watch records how the process ended once it does.
func (p *proc) watch() {
	res, err := p.h.Wait(context.Background())
	p.mu.Lock()
	var exit *sdk.CommandExitError
	switch {
	case res != nil:
		p.result.ExitCode, p.result.Error = new(res.ExitCode), res.Error
	case errors.As(err, &exit):
		p.result.ExitCode, p.result.Error = new(exit.ExitCode), exit.Message
	case err != nil && !errors.Is(err, sdk.ErrDisconnected):
		p.result.Error = explain(err, "wait for the process", p.result.Sandbox).Error()
	}
	p.mu.Unlock()
	close(p.done)
}

// wait waits up to d for the process to end, sending its output as
// progress meanwhile; false when ctx ended first.
func (p *proc) wait(ctx context.Context, d time.Duration, pr *progress) bool {
	p.mu.Lock()
	p.report = func(s string) { pr.Report(ctx, s) }
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.report = nil
		p.mu.Unlock()
		pr.Flush(ctx)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
	case <-ctx.Done():
		return false
	}
	return true
}

// take returns the unread output and the state; ended is true once the
// process ended (it then has nothing more to say).
func (p *proc) take() (out commandResult, ended bool) {
	select {
	case <-p.done:
		ended = true
	default:
	}
	p.mu.Lock()
	out = p.result
	p.mu.Unlock()
	var c1, c2 bool
	out.Stdout, c1 = p.stdout.Take()
	out.Stderr, c2 = p.stderr.Take()
	out.Truncated, out.Running = c1 || c2, !ended
	if !ended {
		out.ExitCode, out.Error = nil, ""
	}
	return out, ended
}

func (t *tools) registerCommands(srv *mcp.Server) {
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "run_command",
		Title: "Run a shell command",
		Description: "Run a shell command in a sandbox and return its exit code, stdout and stderr. A command still running " +
			"after wait_seconds is not stopped: the result has running=true and its pid; poll it with command_output, stop it " +
			"with command_kill. Output is sent as progress notifications while waiting; cancelling the call kills the command.",
	}, t.runCommand)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "command_output",
		Title:       "Read a command's output",
		Description: "Return the output a command started by run_command printed since the last call, and its exit code once it ended.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.commandOutput)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "command_kill",
		Title:       "Kill a command",
		Description: "Kill a running process in a sandbox (SIGKILL) and return its last output.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: new(true)},
	}, t.commandKill)
}

func (t *tools) runCommand(ctx context.Context, req *mcp.CallToolRequest, in runCommandArgs) (*mcp.CallToolResult, commandResult, error) {
	wait, err := seconds("wait_seconds", in.WaitSeconds, defaultCommandWait, maxCommandWait)
	if err != nil {
		return nil, commandResult{}, err
	}
	st, sb, note, err := t.target(ctx, req, in.Sandbox)
	if err != nil {
		return nil, commandResult{}, err
	}
	p := newProc(t.svc.cfg.OutputLimit)
	p.result.Sandbox = sb.ID()
	h, err := sb.Commands.Start(ctx, in.Command, &sdk.CommandOptions{Cwd: in.Cwd, Envs: in.Envs, User: in.User,
		Timeout: sdk.NoTimeout, OnStdout: p.onStdout, OnStderr: p.onStderr, DiscardOutput: true})
	if err != nil {
		return nil, commandResult{}, st.fail("run_command", sb.ID(), err)
	}
	p.h = h
	p.result.PID = int(h.PID())
	go p.watch()
	if !p.wait(ctx, wait, newProgress(req)) {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killSettle)
		defer cancel()
		_ = h.Kill(kctx)
		h.Disconnect()
		return nil, commandResult{}, explain(ctx.Err(), "run_command", sb.ID())
	}
	out, ended := p.take()
	if !ended {
		st.addProc(sb.ID(), p)
	}
	out.Note = note
	return nil, out, nil
}

func (s *session) addProc(sandbox string, p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[key(sandbox, strconv.Itoa(p.result.PID))] = p
}

// proc returns the session's record of process pid, attaching to the
// process when the session did not start it (attached is then true).
func (s *session) proc(ctx context.Context, sb *sdk.Sandbox, pid int) (p *proc, attached bool, err error) {
	k := key(sb.ID(), strconv.Itoa(pid))
	s.mu.Lock()
	p, ok := s.procs[k]
	s.mu.Unlock()
	if ok {
		return p, false, nil
	}
	if pid <= 0 {
		return nil, false, errors.New("pid must be a positive process ID returned by run_command")
	}
	p = newProc(s.cfg.OutputLimit)
	p.result.Sandbox, p.result.PID = sb.ID(), pid
	h, err := sb.Commands.Connect(ctx, uint32(pid), &sdk.CommandConnectOptions{Timeout: sdk.NoTimeout,
		OnStdout: p.onStdout, OnStderr: p.onStderr, DiscardOutput: true})
	if err != nil {
		return nil, false, s.fail("attach to process "+strconv.Itoa(pid), sb.ID(), err)
	}
	p.h = h
	go p.watch()
	s.addProc(sb.ID(), p)
	// envd answers an attach to a process that recently ended with its end
	// event: give it a moment so the answer says so.
	select {
	case <-p.done:
	case <-time.After(attachSettle):
	}
	return p, true, nil
}

func (t *tools) commandOutput(ctx context.Context, req *mcp.CallToolRequest, in commandOutputArgs) (*mcp.CallToolResult, commandResult, error) {
	if err := within("wait_seconds", in.WaitSeconds, 0, maxCommandWait); err != nil {
		return nil, commandResult{}, err
	}
	st, sb, _, err := t.target(ctx, req, in.Sandbox)
	if err != nil {
		return nil, commandResult{}, err
	}
	p, attached, err := st.proc(ctx, sb, in.PID)
	if err != nil {
		return nil, commandResult{}, err
	}
	if in.WaitSeconds > 0 && !p.wait(ctx, time.Duration(in.WaitSeconds)*time.Second, newProgress(req)) {
		return nil, commandResult{}, explain(ctx.Err(), "command_output", sb.ID())
	}
	out, ended := p.take()
	if ended {
		st.dropProc(sb.ID(), in.PID)
	}
	if attached {
		out.Note = "this session did not start the process: output printed before this call is not available"
	}
	return nil, out, nil
}

func (s *session) dropProc(sandbox string, pid int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.procs, key(sandbox, strconv.Itoa(pid)))
}

func (t *tools) commandKill(ctx context.Context, req *mcp.CallToolRequest, in commandKillArgs) (*mcp.CallToolResult, commandResult, error) {
	st, sb, _, err := t.target(ctx, req, in.Sandbox)
	if err != nil {
		return nil, commandResult{}, err
	}
	if in.PID <= 0 {
		return nil, commandResult{}, errors.New("pid must be a positive process ID")
	}
	if err := sb.Commands.Kill(ctx, uint32(in.PID)); err != nil {
		return nil, commandResult{}, st.fail("command_kill", sb.ID(), err)
	}
	st.mu.Lock()
	p, ok := st.procs[key(sb.ID(), strconv.Itoa(in.PID))]
	st.mu.Unlock()
	if !ok {
		return nil, commandResult{Sandbox: sb.ID(), PID: in.PID}, nil
	}
	p.wait(ctx, killSettle, nil)
	out, ended := p.take()
	if ended {
		st.dropProc(sb.ID(), in.PID)
	}
	return nil, out, nil
}
