package initproc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// maxLine is the longest line of agent output relayed as one line (bytes);
// longer lines are split.
const maxLine = 8 << 10

// output writes whole lines to the container's stdout (a pipe the host drains
// at a bounded rate) without ever blocking: the descriptor is non-blocking,
// and a line that does not fit in the pipe, or finds no reader while the
// server restarts, is dropped and counted; the next line that gets through
// reports the count. Every line is written with one write(2) starting with a
// newline, so it starts a line of its own whatever another writer of the pipe
// left unfinished. Safe for concurrent use.
type output struct {
	mu      sync.Mutex
	fd      int
	dropped int
}

// newOutput makes fd non-blocking and returns an output writing to it.
func newOutput(fd int) (*output, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("make output non-blocking: %w", err)
	}
	return &output{fd: fd}, nil
}

// Printf writes one formatted line.
func (o *output) Printf(format string, args ...any) {
	o.Line(fmt.Appendf(nil, format, args...))
}

// Line writes line (without its newline), or drops it.
func (o *output) Line(line []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dropped > 0 {
		if !o.write(fmt.Appendf(nil, "cubby init: %d lines of output dropped (pipe full or no reader)", o.dropped)) {
			o.dropped++
			return
		}
		o.dropped = 0
	}
	if !o.write(line) {
		o.dropped++
	}
}

// write reports whether all of "\n"+line+"\n" was written.
func (o *output) write(line []byte) bool {
	buf := make([]byte, 0, len(line)+2)
	buf = append(append(append(buf, '\n'), line...), '\n')
	n, err := unix.Write(o.fd, buf)
	return err == nil && n == len(buf)
}

// relay copies the agent's output from r to out line by line (blank lines
// dropped, longer lines than maxLine split) until r fails.
func relay(r io.Reader, out *output) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if trimmed := bytes.TrimRight(line, "\r\n"); len(bytes.TrimSpace(trimmed)) > 0 {
			out.Line(trimmed)
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

// CatchSIGPIPE makes a write to a pipe without reader fail with EPIPE instead
// of ending the process, also on os.Stdout and os.Stderr. It catches the
// signal (signal.Notify) rather than ignoring it, so programs the process
// starts get the default disposition back at exec.
func CatchSIGPIPE() {
	signal.Notify(make(chan os.Signal, 1), unix.SIGPIPE)
}
