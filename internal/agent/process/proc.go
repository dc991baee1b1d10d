package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	pb "github.com/cubby-dev/cubby/internal/envdpb/process"
)

// Read sizes of the output readers (docs/wire/envd.md: ≤32 KiB pipes, ≤16 KiB PTY).
const (
	pipeChunk = 32 << 10
	ptyChunk  = 16 << 10
)

// drainGrace bounds how long output is still read after the process itself has
// exited; it matters only when a leftover background child keeps the output open.
const drainGrace = 500 * time.Millisecond

// errNoStdin is returned when writing to or closing a process without a stdin pipe.
var errNoStdin = errors.New("stdin is not enabled for this process")

// errNoPTY is returned for PTY input or resize on a process started without a PTY.
var errNoPTY = errors.New("process has no pty")

// proc is one process started by the service.
type proc struct {
	pid    uint32
	tag    *string
	config *pb.ProcessConfig // as listed by List (cwd resolved)
	cmd    *exec.Cmd
	out    *hub
	log    *slog.Logger

	pty     *os.File   // PTY master, nil without a PTY
	outputs []*os.File // read ends (stdout, stderr) or the PTY master

	inMu  sync.Mutex // serialises writes to stdin / the PTY
	stMu  sync.Mutex // guards stdin and exited
	stdin *os.File   // write end of the stdin pipe; nil when absent or closed

	exited  bool // the leader exited (it may not be reaped yet); no more signals
	done    chan struct{}
	endedAt time.Time // set by the service when retired, under its lock
}

// signal sends sig to the process group and its leader while the leader has not
// exited. It returns false when the process already exited.
func (p *proc) signal(sig syscall.Signal) (bool, error) {
	p.stMu.Lock()
	defer p.stMu.Unlock()
	if p.exited {
		return false, nil
	}
	pid := int(p.pid)
	gerr := unix.Kill(-pid, sig)
	lerr := unix.Kill(pid, sig)
	if gerr != nil && lerr != nil && !errors.Is(lerr, unix.ESRCH) {
		return true, fmt.Errorf("signal %v to pid %d: %w", sig, pid, lerr)
	}
	return true, nil
}

// kill sends SIGKILL to the process group; used by deadlines and Close.
func (p *proc) kill() { _, _ = p.signal(unix.SIGKILL) }

// write sends input bytes to the stdin pipe (stdin) or the PTY master (pty).
// A PTY process accepts stdin bytes on its PTY, having no separate stdin.
// The write gives up when ctx ends.
func (p *proc) write(ctx context.Context, data []byte, toPTY bool) error {
	f, err := p.inputFile(toPTY)
	if err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	_ = f.SetWriteDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	defer stop()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write input to pid %d: %w", p.pid, err)
	}
	return nil
}

func (p *proc) inputFile(toPTY bool) (*os.File, error) {
	if p.pty != nil {
		return p.pty, nil
	}
	if toPTY {
		return nil, errNoPTY
	}
	p.stMu.Lock()
	defer p.stMu.Unlock()
	if p.stdin == nil {
		return nil, errNoStdin
	}
	return p.stdin, nil
}

// closeStdin closes the stdin pipe so the process reads EOF. Closing twice is fine.
func (p *proc) closeStdin() error {
	if p.pty != nil {
		return errNoStdin
	}
	p.stMu.Lock()
	f := p.stdin
	p.stdin = nil
	p.stMu.Unlock()
	if f == nil {
		return nil
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close stdin of pid %d: %w", p.pid, err)
	}
	return nil
}

// resize sets the PTY window size (TIOCSWINSZ); the kernel signals SIGWINCH.
func (p *proc) resize(size *pb.PTY_Size) error {
	if p.pty == nil {
		return errNoPTY
	}
	ws := &pty.Winsize{Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows())}
	if err := pty.Setsize(p.pty, ws); err != nil {
		return fmt.Errorf("resize pty of pid %d: %w", p.pid, err)
	}
	return nil
}

// supervise pumps output into the hub, waits for the process and publishes the
// end event. onExit runs after the leader is reaped and before the end event is
// published (the service uses it to retire the process).
func (p *proc) supervise(onExit func(*proc)) {
	var readers sync.WaitGroup
	for i, f := range p.outputs {
		readers.Add(1)
		go func() {
			defer readers.Done()
			p.pump(f, p.outputKind(i))
		}()
	}
	p.waitExit()
	err := p.cmd.Wait()
	for _, f := range p.outputs {
		_ = f.SetReadDeadline(time.Now().Add(drainGrace))
	}
	readers.Wait()
	for _, f := range p.outputs {
		_ = f.Close()
	}
	_ = p.closeStdin()
	onExit(p)
	p.out.finish(endEvent(p.cmd.ProcessState, err))
	close(p.done)
}

// waitExit blocks until the leader exits without reaping it (WNOWAIT), then marks
// it exited, so a signal can never hit a recycled pid.
func (p *proc) waitExit() {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, int(p.pid), &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.stMu.Lock()
	p.exited = true
	p.stMu.Unlock()
}

type outputKind int

const (
	kindStdout outputKind = iota
	kindStderr
	kindPTY
)

func (p *proc) outputKind(i int) outputKind {
	if p.pty != nil {
		return kindPTY
	}
	return outputKind(i)
}

// pump reads f in chunks and publishes each as a data event until EOF, an error
// (EIO on a PTY whose slave closed) or the drain deadline.
func (p *proc) pump(f *os.File, kind outputKind) {
	size := pipeChunk
	if kind == kindPTY {
		size = ptyChunk
	}
	buf := make([]byte, size)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.out.publish(dataEvent(kind, buf[:n]), n)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, unix.EIO) {
				p.log.Warn("read process output", "pid", p.pid, "err", err)
			}
			return
		}
	}
}

func dataEvent(kind outputKind, b []byte) *pb.ProcessEvent {
	b = append([]byte(nil), b...)
	d := &pb.ProcessEvent_DataEvent{}
	switch kind {
	case kindStdout:
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	case kindStderr:
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: b}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

// endEvent follows Go's ProcessState (docs/wire/envd.md): exitCode -1 and exited
// false when killed by a signal, status "exit status N" / "signal: killed", error
// set to the same text whenever the exit was not clean.
func endEvent(ps *os.ProcessState, waitErr error) *pb.ProcessEvent {
	end := &pb.ProcessEvent_EndEvent{ExitCode: -1}
	if ps != nil {
		end.ExitCode = int32(ps.ExitCode())
		end.Exited = ps.Exited()
		end.Status = ps.String()
		if !ps.Success() {
			end.Error = proto.String(ps.String())
		}
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		end.Error = proto.String(waitErr.Error())
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
}
