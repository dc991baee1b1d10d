package process

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/cubby-dev/cubby/internal/envdpb/process"
)

// Start runs a command (docs/wire/envd.md, "Start") and streams start{pid}, its
// output, keepalives and exactly one end event. The request's deadline
// (Connect-Timeout-Ms) kills the process group when it passes; cancelling the
// request without the deadline passing only detaches this stream.
// Errors: unauthenticated (unknown user), invalid_argument (missing cwd or
// command), permission_denied, unavailable (service closed), internal.
func (s *Service) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	spec, err := s.prepare(req)
	if err != nil {
		return err
	}
	p, sub, err := s.launch(ctx, spec)
	if err != nil {
		return err
	}
	defer p.out.unsubscribe(sub)
	return s.stream(ctx, p, sub, keepaliveInterval(req.Header()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

// prepare validates a Start request into a spawnSpec.
func (s *Service) prepare(req *connect.Request[pb.StartRequest]) (*spawnSpec, error) {
	u, err := s.resolveUser(req.Header())
	if err != nil {
		return nil, err
	}
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	cwd, err := resolveCwd(u, cfg.GetCwd(), s.settings.Workdir())
	if err != nil {
		return nil, err
	}
	return &spawnSpec{
		user:   u,
		config: listedConfig(cfg, cwd),
		env:    buildEnv(u, s.settings.EnvVars(), cfg.GetEnvs()),
		pty:    req.Msg.GetPty(),
		stdin:  req.Msg.Stdin == nil || *req.Msg.Stdin,
		tag:    req.Msg.Tag,
	}, nil
}

// launch spawns spec, subscribes to its output before any is read, arms the
// deadline kill and starts supervision.
func (s *Service) launch(ctx context.Context, spec *spawnSpec) (*proc, *subscriber, error) {
	if !s.reserve() {
		return nil, nil, connect.NewError(connect.CodeUnavailable, errors.New("process service is shutting down"))
	}
	p, err := spawn(spec, s.backlog, s.log)
	if err != nil {
		s.procs.Done()
		return nil, nil, err
	}
	sub := p.out.subscribe()
	closed := s.register(p)
	var timer *time.Timer
	if deadline, ok := ctx.Deadline(); ok {
		timer = time.AfterFunc(time.Until(deadline), func() {
			s.log.Info("process deadline passed, killing", "pid", p.pid)
			p.kill()
		})
	}
	s.log.Info("process started", "pid", p.pid, "cmd", spec.config.GetCmd(), "user", spec.user.Name, "pty", spec.pty != nil)
	go func() {
		defer s.procs.Done()
		p.supervise(func(p *proc) {
			if timer != nil {
				timer.Stop()
			}
			s.retire(p)
		})
		s.log.Info("process ended", "pid", p.pid, "status", p.cmd.ProcessState.String())
	}()
	if closed {
		p.kill()
	}
	return p, sub, nil
}

// stream sends start{pid}, then sub's events with keepalives after interval
// without output, until the end event (nil), ctx ends (its error), a send fails,
// or sub was dropped for falling behind (`data_loss`).
func (s *Service) stream(ctx context.Context, p *proc, sub *subscriber, interval time.Duration, send func(*pb.ProcessEvent) error) error {
	start := &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: p.pid}}}
	if err := send(start); err != nil {
		return err
	}
	keepalive := &pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			if err := send(keepalive); err != nil {
				return err
			}
			timer.Reset(interval)
		case <-sub.notify:
			evs, dropped := sub.take()
			for _, ev := range evs {
				if ev.GetEnd() != nil && deadlinePassed(ctx) {
					// killed by the request's deadline: the stream ends with
					// deadline_exceeded, as E2B's envd does, so the SDKs raise
					// their timeout error rather than an exit of -1
					return connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded)
				}
				if err := send(ev); err != nil {
					return err
				}
				if ev.GetEnd() != nil {
					return nil
				}
			}
			if dropped {
				return connect.NewError(connect.CodeDataLoss, fmt.Errorf(
					"stream of pid %d fell more than %d bytes behind its output and was detached", p.pid, s.backlog))
			}
			timer.Reset(interval)
		}
	}
}

// Connect attaches to a running or recently finished process by pid or tag
// (docs/wire/envd.md, "Connect"): start{pid}, then live output, keepalives and the
// end event. Unknown → `not_found` "process with pid N not found".
func (s *Service) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return err
	}
	sub := p.out.subscribe()
	defer p.out.unsubscribe(sub)
	return s.stream(ctx, p, sub, keepaliveInterval(req.Header()), func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// List returns every running process with its config (cwd resolved), pid and
// tag, ordered by pid (docs/wire/envd.md, "List").
func (s *Service) List(_ context.Context, _ *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	s.mu.Lock()
	procs := slices.Collect(maps.Values(s.running))
	s.mu.Unlock()
	slices.SortFunc(procs, func(a, b *proc) int { return int(a.pid) - int(b.pid) })
	res := &pb.ListResponse{}
	for _, p := range procs {
		res.Processes = append(res.Processes, &pb.ProcessInfo{Config: proto.CloneOf(p.config), Pid: p.pid, Tag: p.tag})
	}
	return connect.NewResponse(res), nil
}

// Update resizes a running process's PTY (TIOCSWINSZ). Unknown → `not_found`;
// no PTY → `failed_precondition`; a request without pty changes nothing.
func (s *Service) Update(_ context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if req.Msg.GetPty() != nil {
		if err := p.resize(req.Msg.GetPty().GetSize()); err != nil {
			return nil, inputError(err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// SendInput writes stdin or pty bytes to a running process (an empty payload is
// fine). Unknown → `not_found`; no stdin pipe / no PTY → `failed_precondition`.
func (s *Service) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := writeInput(ctx, p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

// StreamInput is the client-streaming SendInput: a start{process} message
// selecting the process, then data{input} messages written in order; keepalives
// are ignored. Errors as SendInput; data before start → `failed_precondition`.
func (s *Service) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := s.lookup(ev.Start.GetProcess(), false)
			if err != nil {
				return nil, err
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("stream input must begin with a start event"))
			}
			if err := writeInput(ctx, p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func writeInput(ctx context.Context, p *proc, in *pb.ProcessInput) error {
	var err error
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		err = p.write(ctx, v.Stdin, false)
	case *pb.ProcessInput_Pty:
		err = p.write(ctx, v.Pty, true)
	}
	if err != nil {
		return inputError(err)
	}
	return nil
}

// inputError maps input/resize failures to connect codes.
func inputError(err error) error {
	switch {
	case errors.Is(err, errNoStdin), errors.Is(err, errNoPTY), errors.Is(err, syscall.EPIPE), errors.Is(err, os.ErrClosed):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	default:
		return connect.NewError(connect.CodeInternal, err)
	}
}

// SendSignal sends SIGKILL or SIGTERM to a running process's group
// (docs/wire/envd.md). Unknown → `not_found` (the SDK's kill() then returns false); any other
// signal → `invalid_argument`.
func (s *Service) SendSignal(_ context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	var sig syscall.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = syscall.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = syscall.SIGTERM
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unsupported signal %v", req.Msg.GetSignal()))
	}
	if _, err := p.signal(sig); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

// CloseStdin closes a running process's stdin pipe so it reads EOF (closing
// again is fine). Unknown → `not_found`; PTY processes → `failed_precondition`.
func (s *Service) CloseStdin(_ context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, inputError(err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// deadlinePassed reports whether ctx has a deadline that has passed (its
// Done channel may not have fired yet).
func deadlinePassed(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}
