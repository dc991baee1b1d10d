// Package jupyter is a client for Jupyter kernels (messaging protocol v5.3 over
// ZeroMQ): it launches a kernel from its kernelspec in its own process group,
// connects shell/control/iopub over a private ipc directory, signs and verifies
// every message (HMAC-SHA256) and runs executions with interrupt, restart and
// kernel-death handling. The kernels' behaviour it relies on:
// docs/wire/code-interpreter.md.
package jupyter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Errors returned by Kernel methods; test with errors.Is.
var (
	// ErrKernelDied: the kernel process exited without being asked to.
	ErrKernelDied = errors.New("kernel died")
	// ErrRestarted: the kernel was restarted while the call was running.
	ErrRestarted = errors.New("kernel restarted")
	// ErrClosed: the kernel was shut down.
	ErrClosed = errors.New("kernel shut down")
	// ErrInterruptTimeout: an interrupted execution did not end within the grace
	// period; the kernel was killed (the next Execute starts it again).
	ErrInterruptTimeout = errors.New("kernel did not respond to interrupt; killed")
)

// Options configure how Start launches a kernel. Zero values take the defaults
// given per field.
type Options struct {
	// Dir is the kernel's working directory ("" = the caller's).
	Dir string
	// Env is the full environment ("KEY=value"); nil = os.Environ(). The spec's
	// env entries are applied over it.
	Env []string
	// Credential runs the kernel as another uid/gid (nil = the caller's).
	Credential *syscall.Credential
	// ExtraArgs are appended to the kernelspec argv.
	ExtraArgs []string
	// LogPath receives the kernel's stdout and stderr ("" = discarded), one
	// log/slog JSON record per line: {"time","level":"INFO","msg":<line>,
	// "source":"kernel","kernel":<spec name>, LogAttrs...}. Lines longer than
	// 64 KiB are split.
	LogPath string
	// LogAttrs are added to every record in LogPath (e.g. the context ID).
	LogAttrs []slog.Attr
	// LogMaxBytes caps the log file (default 1 MiB).
	LogMaxBytes int64
	// RuntimeDir is the parent of the private 0700 per-kernel directory holding
	// the connection file and ipc sockets (default os.TempDir()).
	RuntimeDir string
	// Transport of the kernel's sockets (default IPC).
	Transport Transport
	// Dialer connects sockets (default ZMQDialer).
	Dialer Dialer
	// Launcher starts kernel processes (nil = exec the kernelspec argv). When
	// it fails, or its kernel exits or fails the handshake before it is ready
	// (and ctx has not ended), the kernel is started by exec instead and the
	// failure is logged.
	Launcher Launcher
	// InterruptGrace bounds the wait for an interrupted execution to end
	// before the kernel is killed (default 3 s).
	InterruptGrace time.Duration
	// ShutdownGrace bounds the wait for a graceful exit on Shutdown (default 2 s).
	ShutdownGrace time.Duration
	// IdleGrace bounds the wait for status idle after execute_reply (default 3 s);
	// past it the execution ends with Reply.Incomplete set.
	IdleGrace time.Duration
	// HandshakeTimeout bounds one start attempt from the moment the kernel
	// listens (TCP) or was started (ipc): connecting and its kernel_info_reply;
	// 0 = only ctx. A TCP kernel whose attempt times out is killed and started
	// again with new ports (up to tcpStartAttempts), for kernels that
	// sometimes never answer a start (the Rapaio Java kernel).
	HandshakeTimeout time.Duration
	// SettleDelay keeps an execution open this long after reply and idle, for
	// kernels that publish output out of order (Deno's execute_result can trail
	// its idle status by microseconds to milliseconds); 0 = finish at once.
	SettleDelay time.Duration
	// MaxPendingBytes caps the output queued for one execution that the consumer
	// has not taken yet (default 256 MiB); output beyond it is dropped and counted.
	MaxPendingBytes int64
	// OOM reads the OOM-kill counter of the kernel's memory cgroup (nil = no
	// detection). With it, an execution whose kernel is SIGKILLed while the
	// counter rises fails with an *OOMError instead of a plain ErrKernelDied.
	OOM OOMCounter
	// Log receives diagnostics (default slog.Default()).
	Log *slog.Logger
}

func (o *Options) defaults() {
	if o.LogMaxBytes <= 0 {
		o.LogMaxBytes = 1 << 20
	}
	if o.RuntimeDir == "" {
		o.RuntimeDir = os.TempDir()
	}
	if o.Transport == "" {
		o.Transport = IPC
	}
	if o.Dialer == nil {
		o.Dialer = ZMQDialer
	}
	if o.InterruptGrace <= 0 {
		o.InterruptGrace = 3 * time.Second
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = 2 * time.Second
	}
	if o.IdleGrace <= 0 {
		o.IdleGrace = 3 * time.Second
	}
	if o.MaxPendingBytes <= 0 {
		o.MaxPendingBytes = 256 << 20
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// KernelInfo is the kernel_info_reply content the client records (messaging v5.3).
type KernelInfo struct {
	ProtocolVersion       string       `json:"protocol_version"`
	Implementation        string       `json:"implementation"`
	ImplementationVersion string       `json:"implementation_version"`
	LanguageInfo          LanguageInfo `json:"language_info"`
	Banner                string       `json:"banner"`
}

// LanguageInfo is kernel_info_reply.language_info.
type LanguageInfo struct {
	Name          string `json:"name"`
	Version       string `json:"version"`
	MimeType      string `json:"mimetype"`
	FileExtension string `json:"file_extension"`
}

// Kernel is a running kernel. Its methods are safe for concurrent use; executions
// are serialised (one in flight). After a death or a killed interrupt the next
// Execute starts a fresh kernel process (state is lost); Restart does so at once.
type Kernel struct {
	spec *KernelSpec
	opts Options
	log  *slog.Logger

	execMu sync.Mutex // held by Execute and by (re)starts

	mu     sync.Mutex
	cur    *instance
	closed bool
}

// Start launches spec with opts and returns once the kernel answered a
// kernel_info_request and its iopub channel delivers messages. On error
// (ctx ended, process exited, sockets failed) nothing is left running.
func Start(ctx context.Context, spec *KernelSpec, opts Options) (*Kernel, error) {
	opts.defaults()
	k := &Kernel{spec: spec, opts: opts, log: opts.Log.With("kernel", spec.Name)}
	in, err := k.launch(ctx)
	if err != nil {
		return nil, err
	}
	k.cur = in
	return k, nil
}

// Spec returns the kernelspec the kernel was started from.
func (k *Kernel) Spec() *KernelSpec { return k.spec }

// Info returns the current kernel process's kernel_info_reply.
func (k *Kernel) Info() KernelInfo {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur.info
}

// Pid returns the kernel process id (also its process group id), 0 when closed.
func (k *Kernel) Pid() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return 0
	}
	return k.cur.pid
}

// Done returns a channel closed when the current kernel process exits.
func (k *Kernel) Done() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur.dead
}

// Interrupt interrupts the running execution: SIGINT to the kernel's process
// group, or interrupt_request on control when the spec's interrupt_mode is
// "message". It does not wait for the execution to end.
func (k *Kernel) Interrupt() error {
	k.mu.Lock()
	in, closed := k.cur, k.closed
	k.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return in.interrupt(k.spec.InterruptMode)
}

// Restart kills the kernel process (an execution in flight returns ErrRestarted)
// and starts a fresh one; it returns once the new kernel is ready.
func (k *Kernel) Restart(ctx context.Context) error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return ErrClosed
	}
	old := k.cur
	k.mu.Unlock()
	old.stop(ErrRestarted)
	k.execMu.Lock()
	defer k.execMu.Unlock()
	return k.replace(ctx, old)
}

// replace starts a new instance instead of old; execMu must be held.
func (k *Kernel) replace(ctx context.Context, old *instance) error {
	k.mu.Lock()
	current := k.cur == old
	k.mu.Unlock()
	if !current {
		return nil // another caller already replaced it
	}
	old.stop(ErrRestarted)
	old.cleanup()
	in, err := k.launch(ctx)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		in.stop(ErrClosed)
		in.cleanup()
		return ErrClosed
	}
	k.cur = in
	return nil
}

// Shutdown asks the kernel to exit (shutdown_request on control), waits up to
// Options.ShutdownGrace or ctx, then kills its process group and removes its
// runtime directory. An execution in flight returns ErrClosed. Idempotent.
func (k *Kernel) Shutdown(ctx context.Context) error {
	in, ok := k.markClosed()
	if !ok {
		return nil
	}
	if in.alive() {
		if err := in.send(in.control, "shutdown_request", map[string]any{"restart": false}); err == nil {
			t := time.NewTimer(k.opts.ShutdownGrace)
			select {
			case <-in.dead:
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
	}
	k.teardown(in)
	return nil
}

// Close kills the kernel at once (no graceful shutdown). Idempotent.
func (k *Kernel) Close() error {
	if in, ok := k.markClosed(); ok {
		k.teardown(in)
	}
	return nil
}

// markClosed marks k closed and returns its current instance; ok is false
// when k already was closed.
func (k *Kernel) markClosed() (in *instance, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, false
	}
	k.closed = true
	return k.cur, true
}

// teardown kills in (an execution in flight returns ErrClosed) and, once no
// execution holds it, removes its runtime directory.
func (k *Kernel) teardown(in *instance) {
	in.stop(ErrClosed)
	k.execMu.Lock()
	in.cleanup()
	k.execMu.Unlock()
}

// instanceForExec returns a live instance, restarting a dead one; execMu held.
func (k *Kernel) instanceForExec(ctx context.Context) (*instance, error) {
	k.mu.Lock()
	in, closed := k.cur, k.closed
	k.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if in.alive() {
		return in, nil
	}
	k.log.Info("kernel not running; starting it again", "reason", in.stopErr())
	if err := k.replace(ctx, in); err != nil {
		return nil, fmt.Errorf("restart kernel %s: %w", k.spec.Name, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cur, nil
}

// tcpStartAttempts bounds the starts of a TCP kernel: its ports are picked
// before launch and another socket can take one in between, which the kernel
// reports by exiting (Deno: "AddrInUse") or resetting a connection.
const tcpStartAttempts = 3

// launch starts a kernel (launchOnce), retrying a failed TCP start with fresh
// ports up to tcpStartAttempts times while ctx lasts.
func (k *Kernel) launch(ctx context.Context) (*instance, error) {
	for attempt := 1; ; attempt++ {
		in, err := k.launchOnce(ctx)
		if err == nil || k.opts.Transport != TCP || attempt == tcpStartAttempts || ctx.Err() != nil {
			return in, err
		}
		k.log.Warn("kernel start failed; retrying with new ports", "attempt", attempt, "err", err)
	}
}

// launchOnce starts a kernel process with Options.Launcher (falling back to
// exec) and connects to it; on error everything is undone.
func (k *Kernel) launchOnce(ctx context.Context) (*instance, error) {
	if k.opts.Launcher == nil {
		return k.launchWith(ctx, nil)
	}
	in, err := k.launchWith(ctx, k.opts.Launcher)
	if err == nil || ctx.Err() != nil {
		return in, err
	}
	k.log.Warn("kernel launcher failed; starting the kernel by exec", "err", err)
	return k.launchWith(ctx, nil)
}

// launchWith starts a process (launcher nil = exec), connects and handshakes.
func (k *Kernel) launchWith(ctx context.Context, launcher Launcher) (*instance, error) {
	in, err := k.spawn(ctx, launcher)
	if err != nil {
		return nil, fmt.Errorf("start kernel %s: %w", k.spec.Name, err)
	}
	fail := func(err error) (*instance, error) {
		in.stop(ErrClosed)
		in.cleanup()
		return nil, fmt.Errorf("start kernel %s: %w", k.spec.Name, err)
	}
	if err := in.waitPorts(ctx); err != nil {
		return fail(err)
	}
	actx, cancel := ctx, context.CancelFunc(func() {})
	if k.opts.HandshakeTimeout > 0 {
		actx, cancel = context.WithTimeout(ctx, k.opts.HandshakeTimeout)
	}
	defer cancel()
	if err := in.connect(actx, k.opts.Dialer); err != nil {
		return fail(err)
	}
	in.startReaders()
	info, err := in.handshake(actx)
	if err != nil {
		return fail(err)
	}
	in.info = info
	k.log.Debug("kernel ready", "pid", in.pid, "implementation", info.Implementation,
		"language", info.LanguageInfo.Name, "launcher", launcher != nil)
	return in, nil
}

// spawn creates the runtime dir and connection file and starts the process.
func (k *Kernel) spawn(ctx context.Context, launcher Launcher) (*instance, error) {
	o := &k.opts
	dir, err := os.MkdirTemp(o.RuntimeDir, "cubby-kernel-")
	if err != nil {
		return nil, fmt.Errorf("runtime dir: %w", err)
	}
	in := &instance{dir: dir, dead: make(chan struct{}), log: k.log, session: newID()}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	uid, gid, chown := -1, -1, o.Credential != nil
	if chown {
		uid, gid = int(o.Credential.Uid), int(o.Credential.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, fmt.Errorf("chown runtime dir: %w", err)
		}
	}
	if in.conn, err = newConnectionInfo(o.Transport, dir); err != nil {
		return nil, err
	}
	in.conn.KernelName = k.spec.Name
	in.sign = signer{key: []byte(in.conn.Key)}
	connFile := filepath.Join(dir, "kernel.json")
	if err := in.conn.write(connFile, chown, uid, gid); err != nil {
		return nil, err
	}
	if err := in.start(ctx, launcher, k.spec, o, connFile); err != nil {
		return nil, err
	}
	ok = true
	return in, nil
}

// kernelEnv merges spec env entries over base.
func kernelEnv(base []string, spec map[string]string) []string {
	if base == nil {
		base = os.Environ()
	}
	env := append([]string(nil), base...)
	for key, v := range spec {
		env = append(env, key+"="+v)
	}
	return env
}

// openLogSink returns the writer end for the kernel's stdout/stderr and a
// function starting the copy into the capped log as JSON records (nil sink =
// /dev/null); see Options.LogPath.
func openLogSink(path string, max int64, kernel string, attrs []slog.Attr) (w *os.File, copyFn func(), err error) {
	if path == "" {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("open %s: %w", os.DevNull, err)
		}
		return f, func() {}, nil
	}
	l, err := openCappedLog(path, max)
	if err != nil {
		return nil, nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		l.Close()
		return nil, nil, fmt.Errorf("log pipe: %w", err)
	}
	attrs = append([]slog.Attr{slog.String("source", "kernel"), slog.String("kernel", kernel)}, attrs...)
	rec := slog.New(slog.NewJSONHandler(l, nil).WithAttrs(attrs))
	return w, func() {
		go func() {
			copyLines(r, func(line string) { rec.Info(line) })
			r.Close()
			l.Close()
		}()
	}, nil
}

// maxLogLine is the longest kernel output line logged as one record (bytes).
const maxLogLine = 64 << 10

// copyLines calls emit for every non-blank line read from r (without its line
// ending; lines longer than maxLogLine are split) until r ends.
func copyLines(r io.Reader, emit func(string)) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		b, _, err := br.ReadLine()
		if line := strings.TrimRight(string(b), "\r"); strings.TrimSpace(line) != "" {
			emit(line)
		}
		if err != nil {
			return
		}
	}
}
