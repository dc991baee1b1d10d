package sdk

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/envdpb/process"
)

// ErrDisconnected is returned by CommandHandle.Wait after Disconnect: the
// process may still run; reattach with Commands.Connect(pid).
var ErrDisconnected = errors.New("disconnected from the process; reattach with Commands.Connect")

// CommandOptions configure Commands.Run and Commands.Start.
type CommandOptions struct {
	// Envs are added to the sandbox's environment for this command only.
	Envs map[string]string
	// Cwd is the working directory; default the user's home (or the
	// template's workdir). It must exist.
	Cwd string
	// User runs the command as this sandbox user; default the sandbox's
	// default user.
	User string
	// Timeout is the command's lifetime, enforced by envd (the process is
	// killed) and by the SDK (a *TimeoutError): 0 means DefaultStreamTimeout
	// (60 s), NoTimeout means none. It applies to Start too.
	Timeout time.Duration
	// Stdin keeps the command's stdin open for SendStdin/CloseStdin; by
	// default stdin is /dev/null.
	Stdin bool
	// Tag labels the process so it can be told apart in Commands.List.
	Tag string
	// OnStdout and OnStderr receive output as it arrives, decoded as UTF-8
	// (a character split across chunks is delivered whole). They run on one
	// goroutine per command and must not block for long or call Disconnect.
	OnStdout func(string)
	OnStderr func(string)
	// DiscardOutput keeps no copy of the output in the handle: it only
	// reaches the callbacks, and Stdout, Stderr and the result's output stay
	// empty. For long-running commands with much output.
	DiscardOutput bool
}

// CommandConnectOptions configure Commands.Connect.
type CommandConnectOptions struct {
	// Timeout bounds how long the SDK stays attached: 0 means
	// DefaultStreamTimeout (60 s), NoTimeout means none.
	Timeout  time.Duration
	OnStdout func(string)
	OnStderr func(string)
	// DiscardOutput is as in CommandOptions.
	DiscardOutput bool
}

// CommandResult is the outcome of a finished command.
type CommandResult struct {
	ExitCode int
	Stdout   string
	Stderr   string
	// Error is envd's error text for an unclean exit ("exit status 2",
	// "signal: killed"), "" otherwise.
	Error string
}

// ProcessInfo describes a running process (ProcessInfo, docs/wire/envd.md §3.2).
type ProcessInfo struct {
	PID  uint32
	Tag  string
	Cmd  string
	Args []string
	Envs map[string]string
	Cwd  string
}

// Commands starts and manages processes in the sandbox through envd's
// process service (docs/wire/envd.md §3.3). Commands run as `/bin/bash -l -c <cmd>`.
type Commands struct {
	s *Sandbox
}

// Run runs a command and waits for it. On a non-zero exit it returns the
// result and a *CommandExitError. Cancelling ctx kills the command. Errors:
// *CommandExitError, *TimeoutError (the Timeout elapsed, or ErrSandboxKilled),
// *InvalidArgumentError (e.g. a missing Cwd), *AuthenticationError (unknown
// user), *ConnectionError, and ctx's error.
func (c *Commands) Run(ctx context.Context, cmd string, opts *CommandOptions) (*CommandResult, error) {
	h, err := c.startKillable(ctx, cmd, opts)
	if err != nil {
		return nil, err
	}
	select {
	case <-h.done:
		return h.Wait(context.WithoutCancel(ctx))
	case <-ctx.Done():
		killAndDetach(ctx, h)
		return nil, ctxError("run command", ctx.Err())
	}
}

// startKillable starts a command for Run. The start handshake is not bound to
// ctx: envd may already run the command when ctx is cancelled, and only a
// finished handshake yields the pid to kill. On cancellation it waits up to
// killedProbeTimeout for the handshake, kills what started and returns ctx's
// error.
func (c *Commands) startKillable(ctx context.Context, cmd string, opts *CommandOptions) (*CommandHandle, error) {
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	type started struct {
		h   *CommandHandle
		err error
	}
	ch := make(chan started, 1)
	go func() {
		h, err := c.Start(sctx, cmd, opts)
		ch <- started{h, err}
	}()
	select {
	case r := <-ch:
		return r.h, r.err
	case <-ctx.Done():
	}
	wait := time.NewTimer(killedProbeTimeout)
	defer wait.Stop()
	select {
	case r := <-ch:
		if r.h != nil {
			killAndDetach(ctx, r.h)
		}
	case <-wait.C:
		stop()
		if r := <-ch; r.h != nil {
			killAndDetach(ctx, r.h)
		}
	}
	return nil, ctxError("run command", ctx.Err())
}

// killAndDetach kills a command whose caller gave up, bounded by
// killedProbeTimeout, and stops receiving its output.
func killAndDetach(ctx context.Context, h *CommandHandle) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killedProbeTimeout)
	defer cancel()
	_ = h.Kill(kctx)
	h.Disconnect()
}

// Start starts a command and returns once envd reports its pid. ctx bounds
// the start only: the command then runs until it exits, its Timeout elapses
// or it is killed; Disconnect leaves it running. Errors: those of Run except
// *CommandExitError.
func (c *Commands) Start(ctx context.Context, cmd string, opts *CommandOptions) (*CommandHandle, error) {
	var o CommandOptions
	if opts != nil {
		o = *opts
	}
	cfg := &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}, Envs: o.Envs}
	if o.Cwd != "" {
		cfg.Cwd = new(o.Cwd)
	}
	req := &process.StartRequest{Process: cfg}
	if o.Tag != "" {
		req.Tag = new(o.Tag)
	}
	if versionAtLeast(c.s.envdVersion, "0.3.0") {
		req.Stdin = new(o.Stdin)
	} else if o.Stdin {
		return nil, &APIError{Message: "Stdin needs envd 0.3.0 or newer; rebuild the template"}
	}
	return c.s.startProcess(ctx, "start command", o.User, o.Timeout, req, callbacks{stdout: o.OnStdout, stderr: o.OnStderr, discard: o.DiscardOutput})
}

// Connect attaches to a running process by pid (the Connect stream) and
// returns a handle receiving its further output. Errors: *NotFoundError for
// an unknown pid, and the envd errors of Run.
func (c *Commands) Connect(ctx context.Context, pid uint32, opts *CommandConnectOptions) (*CommandHandle, error) {
	var o CommandConnectOptions
	if opts != nil {
		o = *opts
	}
	return c.s.connectProcess(ctx, pid, o.Timeout, callbacks{stdout: o.OnStdout, stderr: o.OnStderr, discard: o.DiscardOutput})
}

// List returns the running processes (commands and PTYs). Errors: the envd
// errors of Run.
func (c *Commands) List(ctx context.Context) ([]ProcessInfo, error) {
	res, err := unary(ctx, c.s, "list processes", "", target{ResourceProcess, ""}, c.s.proc.List, &process.ListRequest{})
	if err != nil {
		return nil, err
	}
	out := make([]ProcessInfo, len(res.GetProcesses()))
	for i, p := range res.GetProcesses() {
		cfg := p.GetConfig()
		out[i] = ProcessInfo{PID: p.GetPid(), Tag: p.GetTag(), Cmd: cfg.GetCmd(), Args: cfg.GetArgs(), Envs: cfg.GetEnvs(), Cwd: cfg.GetCwd()}
	}
	return out, nil
}

// Kill kills a process with SIGKILL. Errors: *NotFoundError when no such
// process runs, and the envd errors of Run.
func (c *Commands) Kill(ctx context.Context, pid uint32) error {
	return c.s.signal(ctx, pid, process.Signal_SIGNAL_SIGKILL)
}

// SendStdin writes data to a process's stdin (it must have been started with
// Stdin). Errors: *NotFoundError and the envd errors of Run.
func (c *Commands) SendStdin(ctx context.Context, pid uint32, data []byte) error {
	_, err := unary(ctx, c.s, "send stdin", "", pidTarget(pid), c.s.proc.SendInput, &process.SendInputRequest{
		Process: pidSelector(pid),
		Input:   &process.ProcessInput{Input: &process.ProcessInput_Stdin{Stdin: data}},
	})
	return err
}

// CloseStdin closes a process's stdin, signalling EOF (envd 0.5.2+). Errors:
// *NotFoundError and the envd errors of Run.
func (c *Commands) CloseStdin(ctx context.Context, pid uint32) error {
	if !versionAtLeast(c.s.envdVersion, "0.5.2") {
		return &APIError{Message: "CloseStdin needs envd 0.5.2 or newer; rebuild the template"}
	}
	_, err := unary(ctx, c.s, "close stdin", "", pidTarget(pid), c.s.proc.CloseStdin, &process.CloseStdinRequest{Process: pidSelector(pid)})
	return err
}

func (s *Sandbox) signal(ctx context.Context, pid uint32, sig process.Signal) error {
	_, err := unary(ctx, s, "kill process", "", pidTarget(pid), s.proc.SendSignal, &process.SendSignalRequest{Process: pidSelector(pid), Signal: sig})
	return err
}

func pidSelector(pid uint32) *process.ProcessSelector {
	return &process.ProcessSelector{Selector: &process.ProcessSelector_Pid{Pid: pid}}
}

func pidTarget(pid uint32) target {
	return target{ResourceProcess, strconv.FormatUint(uint64(pid), 10)}
}

// callbacks receive a process's output.
type callbacks struct {
	stdout, stderr func(string)
	pty            func([]byte)
	discard        bool // keep no copy of stdout and stderr in the handle
}

// eventStream is the common shape of the Start and Connect streams.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

type startStream = connect.ServerStreamForClient[process.StartResponse]
type connectStream = connect.ServerStreamForClient[process.ConnectResponse]

// nextEvent returns the current message's event of either stream type.
func nextEvent(st eventStream) *process.ProcessEvent {
	switch s := st.(type) {
	case *startStream:
		return s.Msg().GetEvent()
	case *connectStream:
		return s.Msg().GetEvent()
	}
	return nil
}

func (s *Sandbox) startProcess(ctx context.Context, op, user string, timeout time.Duration, req *process.StartRequest, cb callbacks) (*CommandHandle, error) {
	sctx, cancel, handshakeDone := s.streamContext(ctx, timeout)
	r := connect.NewRequest(req)
	s.setStreamHeaders(r.Header(), user)
	st, err := s.proc.Start(sctx, r)
	return s.attach(ctx, sctx, cancel, handshakeDone, op, target{ResourceProcess, ""}, st, err, cb)
}

func (s *Sandbox) connectProcess(ctx context.Context, pid uint32, timeout time.Duration, cb callbacks) (*CommandHandle, error) {
	sctx, cancel, handshakeDone := s.streamContext(ctx, timeout)
	r := connect.NewRequest(&process.ConnectRequest{Process: pidSelector(pid)})
	s.setStreamHeaders(r.Header(), "")
	st, err := s.proc.Connect(sctx, r)
	return s.attach(ctx, sctx, cancel, handshakeDone, "connect to process", pidTarget(pid), st, err, cb)
}

// attach waits for the start event (docs/wire/envd.md §3.3: it must come first) and
// hands the stream to a new CommandHandle.
func (s *Sandbox) attach(ctx, sctx context.Context, cancel context.CancelFunc, handshakeDone func(), op string, t target,
	st eventStream, err error, cb callbacks) (*CommandHandle, error) {
	if err == nil {
		if st.Receive() {
			if start := nextEvent(st).GetStart(); start != nil {
				handshakeDone()
				h := newCommandHandle(s, start.GetPid(), st, sctx, cancel, cb)
				go h.run()
				return h, nil
			}
			err = &APIError{Message: op + ": expected a start event first"}
		} else if err = st.Err(); err == nil {
			err = &APIError{Message: op + ": the stream ended before the process started"}
		}
		st.Close()
	}
	handshakeDone()
	cancel()
	var ae *APIError
	if errors.As(err, &ae) {
		return nil, err
	}
	return nil, s.rpcError(ctx, sctx, op, t, err)
}

// CommandHandle is a started (or attached) process. Its output is collected
// and passed to the callbacks by a goroutine until the process ends, the
// handle disconnects or the timeout elapses.
type CommandHandle struct {
	pid    uint32
	s      *Sandbox
	stream eventStream
	sctx   context.Context
	cancel context.CancelFunc
	cb     callbacks

	done   chan struct{}
	mu     sync.Mutex
	stdout strings.Builder
	stderr strings.Builder
	result *CommandResult
	err    error
	discon bool
}

func newCommandHandle(s *Sandbox, pid uint32, st eventStream, sctx context.Context, cancel context.CancelFunc, cb callbacks) *CommandHandle {
	return &CommandHandle{pid: pid, s: s, stream: st, sctx: sctx, cancel: cancel, cb: cb, done: make(chan struct{})}
}

// PID returns the process ID in the sandbox.
func (h *CommandHandle) PID() uint32 { return h.pid }

func (h *CommandHandle) run() {
	defer close(h.done)
	defer h.cancel()
	var outCarry, errCarry []byte
	var end *process.ProcessEvent_EndEvent
	for end == nil && h.stream.Receive() {
		ev := nextEvent(h.stream)
		if d := ev.GetData(); d != nil {
			switch {
			case d.GetStdout() != nil:
				outCarry = h.emit(&h.stdout, outCarry, d.GetStdout(), h.cb.stdout, false)
			case d.GetStderr() != nil:
				errCarry = h.emit(&h.stderr, errCarry, d.GetStderr(), h.cb.stderr, false)
			case d.GetPty() != nil && h.cb.pty != nil:
				h.cb.pty(d.GetPty())
			}
		}
		end = ev.GetEnd()
	}
	h.emit(&h.stdout, nil, outCarry, h.cb.stdout, true)
	h.emit(&h.stderr, nil, errCarry, h.cb.stderr, true)
	streamErr := h.stream.Err()
	h.stream.Close()
	h.finish(end, streamErr)
}

// emit appends a chunk (prefixed by the undecoded tail of the previous one)
// and passes its complete UTF-8 text to the callback; it returns the new
// tail. final flushes everything.
func (h *CommandHandle) emit(buf *strings.Builder, carry, chunk []byte, cb func(string), final bool) []byte {
	data := append(carry, chunk...)
	cut := len(data)
	if !final {
		cut -= incompleteUTF8Tail(data)
	}
	text := string(data[:cut])
	if text != "" {
		if !h.cb.discard {
			h.mu.Lock()
			buf.WriteString(text)
			h.mu.Unlock()
		}
		if cb != nil {
			cb(text)
		}
	}
	return append([]byte(nil), data[cut:]...)
}

// incompleteUTF8Tail is the length of a trailing, possibly incomplete UTF-8
// sequence (0..3 bytes) that should wait for the next chunk.
func incompleteUTF8Tail(b []byte) int {
	for n := 1; n <= 3 && n <= len(b); n++ {
		c := b[len(b)-n]
		if c < 0x80 {
			return 0
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-n:]) {
				return n
			}
			return 0
		}
	}
	return 0
}

func (h *CommandHandle) finish(end *process.ProcessEvent_EndEvent, streamErr error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if end != nil {
		h.result = &CommandResult{ExitCode: int(end.GetExitCode()), Stdout: h.stdout.String(), Stderr: h.stderr.String(), Error: end.GetError()}
		if h.result.ExitCode != 0 {
			h.err = &CommandExitError{ExitCode: h.result.ExitCode, Stdout: h.result.Stdout, Stderr: h.result.Stderr, Message: end.GetError()}
		}
		return
	}
	switch {
	case h.discon:
		h.err = ErrDisconnected
	case streamErr != nil:
		h.err = h.s.rpcError(context.Background(), h.sctx, fmt.Sprintf("process %d", h.pid), pidTarget(h.pid), streamErr)
	default:
		h.err = &APIError{Message: fmt.Sprintf("process %d: the stream ended without an end event", h.pid)}
	}
}

// Wait waits for the process to end and returns its result; a non-zero exit
// also returns a *CommandExitError. If ctx ends first Wait returns ctx's
// error and the handle keeps running. Other errors: *TimeoutError (Timeout
// elapsed or ErrSandboxKilled), ErrDisconnected after Disconnect.
func (h *CommandHandle) Wait(ctx context.Context) (*CommandResult, error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, ctxError(fmt.Sprintf("wait for process %d", h.pid), ctx.Err())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.result, h.err
}

// Stdout returns the stdout received so far.
func (h *CommandHandle) Stdout() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stdout.String()
}

// Stderr returns the stderr received so far.
func (h *CommandHandle) Stderr() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

// Disconnect stops receiving output without killing the process (reattach
// with Commands.Connect). When it returns no callback runs any more. It must
// not be called from a callback.
func (h *CommandHandle) Disconnect() {
	h.mu.Lock()
	h.discon = h.result == nil
	h.mu.Unlock()
	h.cancel()
	<-h.done
}

// Kill kills the process with SIGKILL. Errors: *NotFoundError when it has
// already exited, and the envd errors of Commands.Run.
func (h *CommandHandle) Kill(ctx context.Context) error {
	return h.s.signal(ctx, h.pid, process.Signal_SIGNAL_SIGKILL)
}

// SendStdin writes data to the process's stdin (started with Stdin).
func (h *CommandHandle) SendStdin(ctx context.Context, data []byte) error {
	return h.s.Commands.SendStdin(ctx, h.pid, data)
}

// CloseStdin closes the process's stdin, signalling EOF.
func (h *CommandHandle) CloseStdin(ctx context.Context) error {
	return h.s.Commands.CloseStdin(ctx, h.pid)
}
