// Package zygote runs a Python fork server for ipykernel inside the sandbox:
// one Python process imports ipykernel, IPython, the Cubby display extension and
// optionally the data stack once, then forks a kernel per request, cutting a
// Python context's start from ~0.6 s to ~0.1 s (BenchmarkContextStartColdVsZygote
// in internal/agent/interpreter/bench_test.go; docs/wire/code-interpreter.md).
// A Server implements jupyter.Launcher; forked kernels speak the Jupyter
// messaging protocol exactly like cold ones.
package zygote

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

//go:embed zygote.py
var source []byte

// Source returns the fork server's Python program (zygote.py).
func Source() []byte { return append([]byte(nil), source...) }

// ErrUnavailable is wrapped by Launch errors when the server has exited or was
// closed; callers start the kernel cold instead.
var ErrUnavailable = errors.New("fork server unavailable")

// ErrUnsupported is wrapped by Launch errors for a kernel the server cannot
// fork: not `<Config.Python> -m ipykernel_launcher|ipykernel ...`.
var ErrUnsupported = errors.New("kernel not launchable by the fork server")

// DefaultPreload returns the modules preloaded when Config.Preload is nil:
// numpy, pandas, matplotlib and matplotlib.pyplot (each only if installed).
func DefaultPreload() []string {
	return []string{"numpy", "pandas", "matplotlib", "matplotlib.pyplot"}
}

// Config configures Start. Zero values take the defaults given per field.
type Config struct {
	// Python is the interpreter to run, normally argv[0] of the ipykernel
	// kernelspec (required). Only kernels launched with it are forked.
	Python string
	// Preload lists modules imported before serving, best effort (a module
	// that fails to import is reported in Info.Failed). ipykernel is always
	// imported. nil = DefaultPreload(); empty = none.
	Preload []string
	// Late lists modules imported only after Server.PreloadLate, one at a
	// time between fork requests, best effort (failures go to the log). It
	// lets the first kernel fork before the data stack is imported while
	// later kernels still start with it loaded. Kernels forked before a
	// module was imported import it themselves when they need it.
	Late []string
	// Exclude lists top-level modules that are unimportable while the server
	// imports ipykernel and Preload, so that ipykernel falls back to running
	// without them; afterwards they import normally (kernels can import them).
	// DefaultExclude lists what the interpreter service hides.
	Exclude []string
	// Env is the server's environment ("KEY=value"; nil = os.Environ()). It
	// matters for what preloaded modules read at import time (PYTHONPATH for
	// the extension, thread-count variables); each kernel gets its own env.
	Env []string
	// Dir is the server's working directory (default "/").
	Dir string
	// Credential runs the server as another uid/gid (nil = the caller's).
	// A server can only fork kernels for its own uid unless it runs as root.
	Credential *syscall.Credential
	// RuntimeDir is the parent of the server's private 0700 directory holding
	// its program and socket (default os.TempDir()).
	RuntimeDir string
	// LogPath receives the server's own stdout/stderr ("" = discarded).
	LogPath string
	// StopGrace bounds the wait for the server to exit on Close before it is
	// killed (default 2 s).
	StopGrace time.Duration
	// Log receives diagnostics (default slog.Default()).
	Log *slog.Logger
}

// Info is the server's ready report.
type Info struct {
	// Pid is the server's process id.
	Pid int `json:"pid"`
	// Preloaded lists the Config.Preload modules that were imported.
	Preloaded []string `json:"preloaded"`
	// Failed maps the modules that failed to import to the error.
	Failed map[string]string `json:"failed"`
	// ImportMs maps ipykernel.kernelapp and each Preload module to the time
	// its import took in the server, in milliseconds (a module already
	// imported by an earlier one costs ~0).
	ImportMs map[string]float64 `json:"import_ms"`
	// ReadyMs is the time from spawning the server to its ready line, in
	// milliseconds (interpreter start plus the imports).
	ReadyMs float64 `json:"-"`
}

// DefaultExclude returns the Config.Exclude list the interpreter service uses
// unless configured otherwise: debugpy (the Jupyter debugger backend: kernels
// then answer kernel_info with "debugger": false and do not serve
// debug_request; ~0.15 s of ipykernel's import) and jedi (IPython then
// completes without jedi in complete_request; ~0.07 s). Cubby's API sends
// neither request.
func DefaultExclude() []string { return []string{"debugpy", "jedi"} }

// Server is a running fork server. Its methods are safe for concurrent use.
type Server struct {
	cfg    Config
	log    *slog.Logger
	dir    string
	socket string
	info   Info
	cmd    *exec.Cmd
	stdin  *os.File // closing it asks the server to exit
	done   chan struct{}

	mu      sync.Mutex
	exitErr error
	closed  bool
}

// Start launches the fork server and returns once it has imported ipykernel and
// the preload modules and listens. Errors (Python missing, ipykernel not
// importable, ctx ended) leave nothing running.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Python == "" {
		return nil, errors.New("start fork server: no python interpreter configured")
	}
	cfg.defaults()
	s := &Server{cfg: cfg, log: cfg.Log, done: make(chan struct{})}
	if err := s.prepare(); err != nil {
		return nil, fmt.Errorf("start fork server: %w", err)
	}
	t0 := time.Now()
	ready, err := s.spawn()
	if err != nil {
		os.RemoveAll(s.dir)
		return nil, fmt.Errorf("start fork server: %w", err)
	}
	if err := s.awaitReady(ctx, ready); err != nil {
		s.kill()
		return nil, fmt.Errorf("start fork server: %w", err)
	}
	s.info.ReadyMs = float64(time.Since(t0).Microseconds()) / 1e3
	s.log.Info("python fork server ready", "pid", s.info.Pid, "ready_ms", s.info.ReadyMs,
		"import_ms", s.info.ImportMs, "preloaded", s.info.Preloaded, "failed", s.info.Failed)
	return s, nil
}

func (c *Config) defaults() {
	if c.Preload == nil {
		c.Preload = DefaultPreload()
	}
	if c.Dir == "" {
		c.Dir = "/"
	}
	if c.RuntimeDir == "" {
		c.RuntimeDir = os.TempDir()
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 2 * time.Second
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// prepare creates the private directory with the program, owned by the
// server's user.
func (s *Server) prepare() error {
	dir, err := os.MkdirTemp(s.cfg.RuntimeDir, "cubby-zygote-")
	if err != nil {
		return fmt.Errorf("runtime dir: %w", err)
	}
	s.dir, s.socket = dir, filepath.Join(dir, "z.sock")
	prog := filepath.Join(dir, "zygote.py")
	if err := os.WriteFile(prog, source, 0o600); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("write program: %w", err)
	}
	if c := s.cfg.Credential; c != nil {
		for _, p := range []string{dir, prog} {
			if err := os.Chown(p, int(c.Uid), int(c.Gid)); err != nil {
				os.RemoveAll(dir)
				return fmt.Errorf("chown %s: %w", p, err)
			}
		}
	}
	return nil
}

// spawn starts the Python process: fd 0 = control pipe, fd 3 = ready pipe.
func (s *Server) spawn() (*os.File, error) {
	conf, err := json.Marshal(map[string]any{"socket": s.socket, "preload": s.cfg.Preload,
		"late": s.cfg.Late, "exclude": s.cfg.Exclude})
	if err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("control pipe: %w", err)
	}
	defer ctlR.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		ctlW.Close()
		return nil, fmt.Errorf("ready pipe: %w", err)
	}
	defer readyW.Close()
	out, err := openOutput(s.cfg.LogPath)
	if err != nil {
		ctlW.Close()
		readyR.Close()
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(s.cfg.Python, filepath.Join(s.dir, "zygote.py"), string(conf))
	cmd.Dir, cmd.Env = s.cfg.Dir, s.cfg.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = ctlR, out, out
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cfg.Credential}
	if err := cmd.Start(); err != nil {
		ctlW.Close()
		readyR.Close()
		return nil, fmt.Errorf("exec %s: %w", s.cfg.Python, err)
	}
	s.cmd, s.stdin = cmd, ctlW
	go s.wait()
	return readyR, nil
}

// openOutput opens the server's log for appending (or /dev/null).
func openOutput(path string) (*os.File, error) {
	if path == "" {
		path = os.DevNull
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open fork server log: %w", err)
	}
	return f, nil
}

// wait reaps the server process and removes its directory.
func (s *Server) wait() {
	err := s.cmd.Wait()
	s.mu.Lock()
	if err == nil {
		err = errors.New("exited")
	}
	s.exitErr = err
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		s.log.Warn("python fork server exited", "pid", s.cmd.Process.Pid, "err", err)
	}
	os.RemoveAll(s.dir)
	close(s.done)
}

// awaitReady reads the ready line (or the server's death, or ctx's end).
func (s *Server) awaitReady(ctx context.Context, ready *os.File) error {
	defer ready.Close()
	type result struct {
		line []byte
		err  error
	}
	got := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(ready).ReadBytes('\n')
		got <- result{line, err}
	}()
	var r result
	select {
	case r = <-got:
	case <-ctx.Done():
		return fmt.Errorf("waiting for ready: %w", ctx.Err())
	}
	if r.err != nil {
		if errors.Is(r.err, io.EOF) {
			<-s.done
			return fmt.Errorf("exited before ready: %w (see %s)", s.exitError(), logName(s.cfg.LogPath))
		}
		return fmt.Errorf("read ready line: %w", r.err)
	}
	var msg struct {
		Info
		Error string `json:"error"`
	}
	if err := json.Unmarshal(r.line, &msg); err != nil {
		return fmt.Errorf("decode ready line %q: %w", r.line, err)
	}
	if msg.Error != "" {
		return errors.New(msg.Error)
	}
	s.info = msg.Info
	return nil
}

func logName(p string) string {
	if p == "" {
		return "its log, which is discarded"
	}
	return p
}

func (s *Server) exitError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exitErr
}

// Info returns the server's ready report.
func (s *Server) Info() Info { return s.info }

// Python returns the interpreter the server runs (Config.Python).
func (s *Server) Python() string { return s.cfg.Python }

// Pid returns the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Done returns a channel closed once the server process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Alive reports whether the server is running and not closed.
func (s *Server) Alive() bool {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	select {
	case <-s.done:
		return false
	default:
		return !closed
	}
}

// Close asks the server to exit (EOF on its stdin), kills its process group
// after Config.StopGrace and waits for it. Kernels it forked keep running;
// their owners stop them. Idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stdin.Close()
	t := time.NewTimer(s.cfg.StopGrace)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
	return nil
}

// kill stops a server that never became ready, at once.
func (s *Server) kill() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stdin.Close()
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}
