package ocicli

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// maxLaunchLog bounds what Launch keeps of a runtime's messages (bytes).
const maxLaunchLog = 256 << 10

// logPipe collects the messages a runtime command writes to its --log while
// it runs. Its reader keeps the pipe empty, so the command never blocks on it.
type logPipe struct {
	r, w *os.File
	buf  bytes.Buffer // written by collect until done is closed
	done chan struct{}
}

func newLogPipe() (*logPipe, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("log pipe: %w", err)
	}
	p := &logPipe{r: r, w: w, done: make(chan struct{})}
	go p.collect()
	return p, nil
}

// collect reads until end of file (every writer gone), a deadline or an error.
func (p *logPipe) collect() {
	defer close(p.done)
	chunk := make([]byte, 32<<10)
	for {
		n, err := p.r.Read(chunk)
		p.keep(chunk[:n])
		if err != nil {
			return
		}
	}
}

func (p *logPipe) keep(b []byte) {
	if room := maxLaunchLog - p.buf.Len(); room > 0 {
		p.buf.Write(b[:min(len(b), room)])
	}
}

// started closes this process's write end once the command has its own copy.
func (p *logPipe) started() { _ = p.w.Close() }

// finish, called once the command has exited, stops collect, takes what is
// still in the pipe without waiting for more (runsc's sandbox processes still
// hold the write end) and closes the pipe; it returns the messages.
func (p *logPipe) finish() []byte {
	_ = p.r.SetReadDeadline(time.Now())
	<-p.done
	_ = p.r.SetReadDeadline(time.Time{})
	if rc, err := p.r.SyscallConn(); err == nil {
		_ = rc.Read(func(fd uintptr) bool {
			chunk := make([]byte, 32<<10)
			for {
				n, err := unix.Read(int(fd), chunk)
				if n <= 0 || err != nil {
					return true
				}
				p.keep(chunk[:n])
			}
		})
	}
	_ = p.r.Close()
	return p.buf.Bytes()
}
