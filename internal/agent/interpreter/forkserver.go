package interpreter

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/interpreter/zygote"
	"github.com/cubby-dev/cubby/internal/agent/jupyter"
)

// forkRetry is the least time between two fork server starts, so a server that
// keeps failing or dying costs at most one start per interval; kernels start
// cold in between.
const forkRetry = 30 * time.Second

// newForkServer returns a forkServer starting servers configured by cfg, each
// start bounded by timeout.
func newForkServer(cfg func(python string) zygote.Config, timeout time.Duration, log *slog.Logger) *forkServer {
	life, end := context.WithCancel(context.Background())
	return &forkServer{cfg: cfg, timeout: timeout, retry: forkRetry, log: log, life: life, end: end}
}

// forkServer runs the Python fork server lazily (on the first Python kernel)
// and launches Python kernels through it; it implements jupyter.Launcher, so a
// Kernel falls back to a cold start whenever Launch fails.
type forkServer struct {
	cfg     func(python string) zygote.Config // server configuration at start time
	timeout time.Duration                     // bounds one server start
	retry   time.Duration                     // least time between two starts (forkRetry)
	log     *slog.Logger
	life    context.Context    // ended by close: aborts a start in progress
	end     context.CancelFunc // ends life

	mu       sync.Mutex
	srv      *zygote.Server
	lateFor  *zygote.Server // the server whose late preload was begun
	starting chan struct{}  // closed when the running start attempt ends
	lastTry  time.Time
	closed   bool
	bg       sync.WaitGroup
}

// Launch forks the kernel from the server, starting the server first if needed.
func (f *forkServer) Launch(ctx context.Context, req jupyter.LaunchRequest) (jupyter.Process, error) {
	if len(req.Argv) == 0 {
		return nil, fmt.Errorf("fork kernel: %w: empty argv", zygote.ErrUnsupported)
	}
	srv, err := f.server(ctx, req.Argv[0])
	if err != nil {
		return nil, err
	}
	return srv.Launch(ctx, req)
}

// server returns a live server for python, waiting for (or beginning) a start.
func (f *forkServer) server(ctx context.Context, python string) (*zygote.Server, error) {
	for {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return nil, fmt.Errorf("%w: interpreter service closed", zygote.ErrUnavailable)
		}
		if srv := f.srv; srv != nil && srv.Alive() {
			f.mu.Unlock()
			if srv.Python() != python {
				return nil, fmt.Errorf("%w: fork server runs %s, kernel wants %s", zygote.ErrUnsupported, srv.Python(), python)
			}
			return srv, nil
		}
		wait := f.starting
		if wait == nil {
			if !f.lastTry.IsZero() && time.Since(f.lastTry) < f.retry {
				f.mu.Unlock()
				return nil, fmt.Errorf("%w: started less than %v ago and failed or died since", zygote.ErrUnavailable, f.retry)
			}
			wait = f.begin(python)
		}
		f.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the fork server: %w", ctx.Err())
		}
		f.mu.Lock()
		failed := f.srv == nil || !f.srv.Alive()
		f.mu.Unlock()
		if failed {
			return nil, fmt.Errorf("%w: start failed", zygote.ErrUnavailable)
		}
	}
}

// begin starts a server in the background (mu held); the start outlives the
// caller's ctx so that waiting callers and later contexts can use it.
func (f *forkServer) begin(python string) chan struct{} {
	done := make(chan struct{})
	f.starting, f.lastTry = done, time.Now()
	old := f.srv
	f.srv = nil
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		defer close(done)
		if old != nil {
			old.Close()
		}
		ctx, cancel := context.WithTimeout(f.life, f.timeout)
		defer cancel()
		srv, err := zygote.Start(ctx, f.cfg(python))
		if err != nil {
			f.log.Warn("python fork server did not start; kernels start cold", "err", err)
		}
		f.mu.Lock()
		f.starting = nil
		discard := err == nil && f.closed
		if err == nil && !discard {
			f.srv = srv
		}
		f.mu.Unlock()
		if discard {
			srv.Close()
		}
	}()
	return done
}

// close stops the server (kernels it forked are closed by their contexts).
func (f *forkServer) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.end()
	f.bg.Wait()
	f.mu.Lock()
	srv := f.srv
	f.srv = nil
	f.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// preloadLate makes the running server import its Config.Late modules and
// waits for that (bounded by ctx); false without a live server or when that
// failed. The first kernelStarted call logs the timings.
func (f *forkServer) preloadLate(ctx context.Context) bool {
	srv := f.current()
	if srv == nil || !srv.Alive() {
		return false
	}
	ms, err := srv.PreloadLate(ctx)
	if err != nil {
		if ctx.Err() == nil && srv.Alive() {
			f.log.Warn("python fork server: late preload", "err", err)
		}
		return false
	}
	return len(ms) > 0 && srv.Alive()
}

// kernelStarted is called after a kernel forked by the running server has
// answered: the first time per server, that server's late preload begins in
// the background (so it never delays the first kernel).
func (f *forkServer) kernelStarted() {
	f.mu.Lock()
	defer f.mu.Unlock()
	srv := f.srv
	if srv == nil || f.closed || f.lateFor == srv {
		return
	}
	f.lateFor = srv
	f.bg.Go(func() { f.preloadLateOn(f.life, srv) })
}

func (f *forkServer) preloadLateOn(ctx context.Context, srv *zygote.Server) {
	ms, err := srv.PreloadLate(ctx)
	if err != nil {
		if ctx.Err() == nil && srv.Alive() {
			f.log.Warn("python fork server: late preload", "err", err)
		}
		return
	}
	f.log.Info("python fork server: late preload done", "import_ms", ms)
}

// current returns the running server (nil if none); for tests and metrics.
func (f *forkServer) current() *zygote.Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.srv
}
