package jupyter

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// instance is one kernel process with its sockets. A Kernel replaces its instance
// on restart; an instance is never revived.
type instance struct {
	dir     string
	conn    ConnectionInfo
	sign    signer
	session string
	log     *slog.Logger
	pid     int
	info    KernelInfo

	shell, control, iopub Socket
	router                *router
	readers               sync.WaitGroup

	dead        chan struct{} // closed when the process has exited
	mu          sync.Mutex
	reason      error          // why the instance ended; nil while running
	exitSig     syscall.Signal // signal that ended the process (0 = none/unknown); set before dead closes
	cleanupOnce sync.Once
}

// lookPath resolves a command name against the PATH of env (not the caller's).
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: executable not found in PATH %q", name, path)
}

// start launches the kernel process (with launcher, or exec when nil) and
// watches it.
func (in *instance) start(ctx context.Context, launcher Launcher, spec *KernelSpec, o *Options, connFile string) error {
	w, startCopy, err := openLogSink(o.LogPath, o.LogMaxBytes, spec.Name, o.LogAttrs)
	if err != nil {
		return err
	}
	defer startCopy() // closes the log reader side once every writer is gone
	defer w.Close()
	req := LaunchRequest{Spec: spec, Argv: append(spec.argv(connFile), o.ExtraArgs...), ConnectionFile: connFile,
		Dir: o.Dir, Env: kernelEnv(o.Env, spec.Env), Credential: o.Credential, Output: w}
	var p Process
	if launcher != nil {
		p, err = launcher.Launch(ctx, req)
	} else {
		p, err = execLaunch(req)
	}
	if err != nil {
		return err
	}
	in.pid = p.Pid()
	go in.watch(p)
	return nil
}

// watch waits for the process to exit, records why it ended and kills leftover
// members of its process group.
func (in *instance) watch(p Process) {
	<-p.Done()
	in.mu.Lock()
	in.exitSig = exitSignal(p.Err())
	if in.reason == nil {
		status := "exited"
		if err := p.Err(); err != nil {
			status = err.Error()
		}
		in.reason = fmt.Errorf("%w (%s)", ErrKernelDied, status)
	}
	in.mu.Unlock()
	syscall.Kill(-in.pid, syscall.SIGKILL)
	close(in.dead)
}

// signal returns the signal that ended the process (0 = none or unknown).
func (in *instance) signal() syscall.Signal {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.exitSig
}

// alive reports whether the process is still running and not being stopped.
func (in *instance) alive() bool {
	select {
	case <-in.dead:
		return false
	default:
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.reason == nil
}

// stopErr returns why the instance ended (nil while running).
func (in *instance) stopErr() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.reason
}

// stop records reason (unless one is set) and SIGKILLs the process group.
func (in *instance) stop(reason error) {
	in.mu.Lock()
	if in.reason == nil {
		in.reason = reason
	}
	in.mu.Unlock()
	if in.pid > 0 {
		syscall.Kill(-in.pid, syscall.SIGKILL)
	}
}

// cleanup waits (bounded) for the process to be reaped, closes the sockets and
// removes the runtime directory. Call after stop; idempotent.
func (in *instance) cleanup() {
	in.cleanupOnce.Do(func() {
		if in.pid > 0 {
			t := time.NewTimer(5 * time.Second)
			select {
			case <-in.dead:
			case <-t.C:
				in.log.Warn("kernel process not reaped after SIGKILL", "pid", in.pid)
			}
			t.Stop()
		}
		for _, s := range []Socket{in.shell, in.control, in.iopub} {
			if s != nil {
				s.Close()
			}
		}
		in.readers.Wait()
		os.RemoveAll(in.dir)
	})
}

// listenPoll is how often waitPorts looks for a TCP kernel's listening ports.
const listenPoll = 10 * time.Millisecond

// waitPorts waits until a TCP kernel listens on all five ports (no-op for ipc),
// so that it is never connected to while it binds; it gives up when ctx ends
// or the process exits.
func (in *instance) waitPorts(ctx context.Context) error {
	c := in.conn
	if c.Transport != TCP {
		return nil
	}
	ports := []int{c.ShellPort, c.IOPubPort, c.StdinPort, c.ControlPort, c.HBPort}
	return in.deadOr(waitListening(ctx, ports, listenPoll, in.dead))
}

// connect dials shell (routing identity = session), control and iopub. Dialing
// gives up when ctx ends or the process exits.
func (in *instance) connect(ctx context.Context, dial Dialer) error {
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-in.dead:
			cancel()
		case <-dctx.Done():
		}
	}()
	in.router = newRouter()
	var err error
	if in.iopub, err = dial(dctx, Sub, in.conn.Endpoint(in.conn.IOPubPort), nil); err != nil {
		return in.deadOr(fmt.Errorf("iopub: %w", err))
	}
	if in.shell, err = dial(dctx, Dealer, in.conn.Endpoint(in.conn.ShellPort), []byte(in.session)); err != nil {
		return in.deadOr(fmt.Errorf("shell: %w", err))
	}
	if in.control, err = dial(dctx, Dealer, in.conn.Endpoint(in.conn.ControlPort), nil); err != nil {
		return in.deadOr(fmt.Errorf("control: %w", err))
	}
	return nil
}

// deadOr prefers the process-exit reason over err when the process is gone.
func (in *instance) deadOr(err error) error {
	select {
	case <-in.dead:
		return fmt.Errorf("%w; %v", in.stopErr(), err)
	default:
		return err
	}
}

// startReaders runs one goroutine per socket that decodes, verifies and routes
// messages; it never blocks on consumers (the per-request queues are unbounded).
func (in *instance) startReaders() {
	for name, s := range map[string]Socket{"shell": in.shell, "control": in.control, "iopub": in.iopub} {
		in.readers.Add(1)
		go func() {
			defer in.readers.Done()
			for {
				frames, err := s.Recv()
				if err != nil {
					return
				}
				m, err := in.sign.decode(name, frames)
				if err != nil {
					in.router.badSig.Add(1)
					in.log.Debug("dropping kernel message", "channel", name, "err", err)
					continue
				}
				in.router.dispatch(m)
			}
		}()
	}
}

// header returns a new request header of msgType.
func (in *instance) header(msgType string) Header {
	return Header{MsgID: newID(), Session: in.session, Username: "cubby", Date: isoNow(),
		MsgType: msgType, Version: ProtocolVersion}
}

// sendHeader signs and sends a request with header h.
func (in *instance) sendHeader(s Socket, h Header, content any) error {
	frames, err := in.sign.encode(h, nil, content)
	if err != nil {
		return err
	}
	if err := s.Send(frames); err != nil {
		return fmt.Errorf("send %s: %w", h.MsgType, in.deadOr(err))
	}
	return nil
}

// send sends a request whose replies nobody waits for.
func (in *instance) send(s Socket, msgType string, content any) error {
	return in.sendHeader(s, in.header(msgType), content)
}

// interrupt sends SIGINT to the process group, or interrupt_request on control
// when mode is "message".
func (in *instance) interrupt(mode string) error {
	if mode == "message" {
		return in.send(in.control, "interrupt_request", struct{}{})
	}
	if err := syscall.Kill(-in.pid, syscall.SIGINT); err != nil {
		return fmt.Errorf("interrupt kernel pid %d: %w", in.pid, err)
	}
	return nil
}

// handshakeState says what a handshake that did not finish was waiting for.
func handshakeState(gotReply bool) string {
	if gotReply {
		return "kernel_info_reply received, waiting for a first iopub message"
	}
	return "waiting for kernel_info_reply"
}

// handshake sends kernel_info_request until a reply arrived and iopub delivered a
// message (status or iopub_welcome), which defeats the PUB/SUB slow-joiner race.
// Without a reply the request is repeated every resendBeforeReply: some kernels
// (the Rapaio Java kernel) bind their sockets before they handle messages and
// drop what arrives in between.
func (in *instance) handshake(ctx context.Context) (KernelInfo, error) {
	q := newQueue(0)
	var ids []string
	defer func() { in.router.unregister(ids...) }()
	request := func() error {
		h := in.header("kernel_info_request")
		ids = append(ids, h.MsgID)
		in.router.register(h.MsgID, q)
		return in.sendHeader(in.shell, h, struct{}{})
	}
	if err := request(); err != nil {
		return KernelInfo{}, err
	}
	var info KernelInfo
	gotReply, gotIOPub := false, false
	// Once a reply came without iopub traffic (the SUB joined too late), re-send soon.
	const resendBeforeReply, resendAfterReply = time.Second, 10 * time.Millisecond
	tick := time.NewTicker(resendBeforeReply)
	defer tick.Stop()
	for {
		select {
		case <-q.notify:
			for _, m := range q.drain() {
				switch {
				case m.Channel == "shell" && m.Type() == "kernel_info_reply":
					if err := m.Decode(&info); err != nil {
						return info, err
					}
					if !gotReply {
						tick.Reset(resendAfterReply)
					}
					gotReply = true
				case m.Channel == "iopub":
					gotIOPub = true
				}
			}
			if gotReply && gotIOPub {
				return info, nil
			}
		case <-tick.C:
			if err := request(); err != nil {
				return info, err
			}
		case <-in.dead:
			return info, fmt.Errorf("%s: %w", handshakeState(gotReply), in.stopErr())
		case <-ctx.Done():
			return info, fmt.Errorf("%s: %w", handshakeState(gotReply), ctx.Err())
		}
	}
}
