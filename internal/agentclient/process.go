package agentclient

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	pb "github.com/cubby-dev/cubby/internal/envdpb/process"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
)

// Process is a command the host runs in a sandbox through the agent's envd
// process service (docs/wire/envd.md §3.3), as an SDK's commands.run would.
type Process struct {
	Cmd  string            // executable (looked up in PATH)
	Args []string          // its arguments
	User string            // account to run as; "" = the sandbox's default user
	Cwd  string            // working directory; "" = the user's default
	Env  map[string]string // on top of the sandbox's environment
	Tag  string            // process tag shown by process list; "" = none
}

// Output receives a process's output as it arrives, stdout and stderr chunks
// in order (a chunk may end mid-line).
type Output func(stderr bool, data []byte)

// ErrNoExit is wrapped by Run when the agent ended the process's stream
// without an exit status.
var ErrNoExit = errors.New("process stream ended without an exit status")

// KilledError is returned by Run for a process a signal ended (the OOM
// killer, a deadline): Status is the agent's description ("signal: killed").
type KilledError struct{ Status string }

func (e *KilledError) Error() string { return "process ended by " + e.Status }

func (c *Client) processClient() processconnect.ProcessClient {
	return processconnect.NewProcessClient(c.http, c.base)
}

// request builds a Start request for p with the agent's auth headers.
func (c *Client) request(p Process) *connect.Request[pb.StartRequest] {
	cwd := p.Cwd
	cfg := &pb.ProcessConfig{Cmd: p.Cmd, Args: p.Args, Envs: p.Env}
	if cwd != "" {
		cfg.Cwd = &cwd
	}
	stdin := false
	req := connect.NewRequest(&pb.StartRequest{Process: cfg, Stdin: &stdin})
	if p.Tag != "" {
		req.Msg.Tag = &p.Tag
	}
	if c.token != "" {
		req.Header().Set("X-Access-Token", c.token)
	}
	if p.User != "" {
		req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(p.User+":")))
	}
	return req
}

// Run starts p, passes its output to out (may be nil) and returns its exit
// code once it ends. ctx's deadline is sent along: the agent kills the
// process when it passes. Errors: *KilledError for a process a signal
// ended, the agent refused the request (unknown user, missing cwd), the
// stream broke, ErrNoExit.
func (c *Client) Run(ctx context.Context, p Process, out Output) (int, error) {
	stream, err := c.processClient().Start(ctx, c.request(p))
	if err != nil {
		return -1, fmt.Errorf("start %s: %w", p.Cmd, err)
	}
	defer stream.Close()
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if d := ev.GetData(); d != nil && out != nil {
			if b := d.GetStdout(); len(b) > 0 {
				out(false, b)
			}
			if b := d.GetStderr(); len(b) > 0 {
				out(true, b)
			}
		}
		if end := ev.GetEnd(); end != nil {
			if !end.GetExited() {
				return -1, &KilledError{Status: cmp.Or(end.GetStatus(), end.GetError())}
			}
			return int(end.GetExitCode()), nil
		}
	}
	if err := stream.Err(); err != nil {
		return -1, fmt.Errorf("run %s: %w", p.Cmd, err)
	}
	return -1, fmt.Errorf("run %s: %w", p.Cmd, ErrNoExit)
}

// Start starts p in the background and returns its PID once the agent
// reports it started; the process keeps running after Start returns.
func (c *Client) Start(ctx context.Context, p Process) (uint32, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel() // detaches the stream; the process keeps running
	stream, err := c.processClient().Start(sctx, c.request(p))
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", p.Cmd, err)
	}
	defer stream.Close()
	for stream.Receive() {
		if st := stream.Msg().GetEvent().GetStart(); st != nil {
			return st.GetPid(), nil
		}
	}
	if err := stream.Err(); err != nil {
		return 0, fmt.Errorf("start %s: %w", p.Cmd, err)
	}
	return 0, fmt.Errorf("start %s: stream ended before the process started", p.Cmd)
}
