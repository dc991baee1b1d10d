// Package sandboxlog is the host side of a sandbox's standard output and error.
// The container's init writes to a FIFO in the sandbox directory (never to a
// host file); the server drains it at a bounded rate into a capped, rotating
// log (internal/logfile) of records it stamps with the time of arrival and
// labels with their source, and writes its own records about the sandbox
// beside them. Read returns both with every line labelled, so a line written
// inside the sandbox can never pass for a host record.
package sandboxlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"

	"github.com/cubby-dev/cubby/internal/logfile"
)

// Names inside a sandbox directory.
const (
	// FIFOName is the FIFO the container's stdout and stderr are opened on.
	FIFOName = "output.fifo"
	// LogName is the capped log of records; its predecessor is LogName+logfile.PrevSuffix.
	LogName = "output.log"
)

// Sources of a line, as Read labels them.
const (
	// SourceHost: written by the Cubby server about the sandbox.
	SourceHost = "host"
	// SourceSandbox: arrived on the sandbox's stdout or stderr (its agent, its
	// init, or any process inside that writes there).
	SourceSandbox = "sandbox"
	// SourceKernel: read from a code-interpreter kernel's log inside the sandbox.
	SourceKernel = "kernel"
)

// Defaults of Options.
const (
	DefaultMaxFileBytes = 1 << 20   // each of output.log and output.log.1
	DefaultRate         = 256 << 10 // bytes per second
	DefaultBurst        = 1 << 20   // bytes
	DefaultMaxLine      = 8 << 10   // bytes
)

// throttleNoteEvery bounds how often a throttled drain writes a host record.
const throttleNoteEvery = time.Minute

// Options bound what one sandbox's output costs the host. Zero values select
// the defaults.
type Options struct {
	// MaxFileBytes caps output.log and its rotated predecessor (so the records of
	// a sandbox take at most twice this on disk).
	MaxFileBytes int64
	// Rate is how many bytes per second the drain reads at most; a sandbox
	// writing faster finds the FIFO full (its writers block or drop).
	Rate int
	// Burst is how many bytes the drain reads at once after a quiet time.
	Burst int
	// MaxLine is the longest line kept as one record; longer lines are split.
	MaxLine int
	// Log receives the drain's own failures (default: discarded).
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.Rate <= 0 {
		o.Rate = DefaultRate
	}
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.MaxLine <= 0 {
		o.MaxLine = DefaultMaxLine
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// record is one line of output.log, written only by the server.
type record struct {
	Time   time.Time `json:"time"`
	Source string    `json:"source"`
	Line   string    `json:"line"`
}

// Output is the host end of one sandbox's output: the FIFO held open for
// reading (and writing, so it never reports end of file), the goroutine
// draining it and the capped log. Methods are safe for concurrent use.
type Output struct {
	dir  string
	opts Options
	fifo *os.File
	log  *logfile.Rotating
	lim  *rate.Limiter

	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex // guards failed
	failed   bool       // a write to the log failed (reported once)
	pending  []byte     // partial line; drain goroutine only until done
	notedAt  time.Time  // last throttle note; drain goroutine only
	closeErr error
	once     sync.Once
}

// Open creates the FIFO <dir>/output.fifo (mode 0600) unless it exists,
// opens it and <dir>/output.log, and starts draining. Data a container wrote
// while no server read the FIFO (up to the pipe's buffer) is drained first.
// Errors come from the filesystem.
func Open(dir string, opts Options) (*Output, error) {
	opts = opts.withDefaults()
	path := filepath.Join(dir, FIFOName)
	if err := ensureFIFO(path); err != nil {
		return nil, err
	}
	fifo, err := os.OpenFile(path, os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("open output fifo: %w", err)
	}
	log, err := logfile.Open(filepath.Join(dir, LogName), opts.MaxFileBytes)
	if err != nil {
		_ = fifo.Close()
		return nil, fmt.Errorf("open output log: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &Output{dir: dir, opts: opts, fifo: fifo, log: log, cancel: cancel, done: make(chan struct{}),
		lim: rate.NewLimiter(rate.Limit(opts.Rate), opts.Burst)}
	go o.drain(ctx)
	return o, nil
}

// ensureFIFO makes path a FIFO: kept when it is one, replaced when it is
// anything else, created when missing.
func ensureFIFO(path string) error {
	st, err := os.Lstat(path)
	switch {
	case err == nil && st.Mode()&os.ModeNamedPipe != 0:
		return nil
	case err == nil:
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("replace %s: %w", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("output fifo: %w", err)
	}
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return fmt.Errorf("create output fifo %s: %w", path, err)
	}
	return nil
}

// WriteEnd opens the FIFO for writing, to be given to an OCI runtime as the
// container's stdout and stderr; the caller closes it once the container has
// it. It never blocks (the Output holds a reader).
func (o *Output) WriteEnd() (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(o.dir, FIFOName), os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open output fifo for the container: %w", err)
	}
	return f, nil
}

// Note writes a host record (source "host"): a log/slog JSON object with
// level, msg and the attributes of args.
func (o *Output) Note(level slog.Level, msg string, args ...any) {
	var buf bytes.Buffer
	rec := slog.NewRecord(time.Now(), level, msg, 0)
	rec.Add(args...)
	_ = slog.NewJSONHandler(&buf, nil).Handle(context.Background(), rec)
	o.write(record{Time: rec.Time.UTC(), Source: SourceHost, Line: strings.TrimSpace(buf.String())})
}

// Close stops the drain (what is still in the FIFO stays there for the next
// Open), records a pending partial line and closes the files. It is idempotent.
func (o *Output) Close() error {
	o.once.Do(func() {
		o.cancel()
		err := o.fifo.Close()
		<-o.done
		if len(o.pending) > 0 {
			o.emit(o.pending)
			o.pending = nil
		}
		o.closeErr = errors.Join(err, o.log.Close())
	})
	return o.closeErr
}

// drain reads the FIFO until Close, at most opts.Rate bytes per second.
func (o *Output) drain(ctx context.Context) {
	defer close(o.done)
	buf := make([]byte, min(o.opts.Burst, 64<<10))
	for {
		n, err := o.fifo.Read(buf)
		if n > 0 {
			o.split(buf[:n])
			if !o.throttle(ctx, n) {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
				o.opts.Log.Warn("read sandbox output", "dir", o.dir, "err", err)
			}
			return
		}
	}
}

// throttle waits until n more bytes fit the rate; false once ctx is done.
func (o *Output) throttle(ctx context.Context, n int) bool {
	r := o.lim.ReserveN(time.Now(), n)
	d := r.Delay()
	if d <= 0 {
		return true
	}
	if now := time.Now(); now.Sub(o.notedAt) >= throttleNoteEvery {
		o.notedAt = now
		o.Note(slog.LevelWarn, "sandbox output throttled", "bytes_per_second", o.opts.Rate)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// split records the complete lines of chunk (and pieces of opts.MaxLine bytes
// of longer ones), keeping a partial last line for the next chunk.
func (o *Output) split(chunk []byte) {
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			o.pending = append(o.pending, chunk...)
			chunk = nil
		} else {
			o.pending = append(o.pending, chunk[:i]...)
			chunk = chunk[i+1:]
		}
		for len(o.pending) >= o.opts.MaxLine {
			o.emit(o.pending[:o.opts.MaxLine])
			o.pending = o.pending[o.opts.MaxLine:]
		}
		if i >= 0 {
			o.emit(o.pending)
			o.pending = o.pending[:0]
		}
	}
	if len(o.pending) == 0 {
		o.pending = nil // do not keep a large buffer alive
	}
}

// emit records one line from the sandbox; blank lines are dropped.
func (o *Output) emit(line []byte) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	o.write(record{Time: time.Now().UTC(), Source: SourceSandbox, Line: string(line)})
}

// write appends rec to the log; the first failure is reported to opts.Log.
func (o *Output) write(rec record) {
	data, err := json.Marshal(rec)
	if err == nil {
		_, err = o.log.Write(append(data, '\n'))
	}
	if err == nil || errors.Is(err, os.ErrClosed) {
		return
	}
	o.mu.Lock()
	first := !o.failed
	o.failed = true
	o.mu.Unlock()
	if first {
		o.opts.Log.Warn("write sandbox output log", "dir", o.dir, "err", err)
	}
}
