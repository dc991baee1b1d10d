package template

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// tailLines is how many output lines a failed build quotes in its error.
const tailLines = 30

// progressWriter passes build output through to a human-readable progress stream,
// turning step markers into "[k/n] title… (elapsed)" lines and remembering the
// last lines for error messages. Safe for concurrent Write calls.
type progressWriter struct {
	mu    sync.Mutex
	out   io.Writer
	steps []step
	start time.Time
	buf   []byte
	tail  []string
}

func newProgressWriter(out io.Writer, steps []step) *progressWriter {
	if out == nil {
		out = io.Discard
	}
	return &progressWriter{out: out, steps: steps, start: time.Now()}
}

// Write implements io.Writer; it never fails (progress output is best effort).
func (p *progressWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.line(string(p.buf[:i]))
		p.buf = p.buf[i+1:]
	}
	return len(b), nil
}

func (p *progressWriter) line(s string) {
	s = strings.TrimRight(s, "\r")
	if rest, ok := strings.CutPrefix(s, stepMarker); ok {
		if k, err := strconv.Atoi(rest); err == nil {
			p.stepLocked(k)
			return
		}
	}
	p.tail = append(p.tail, s)
	if len(p.tail) > tailLines {
		p.tail = p.tail[len(p.tail)-tailLines:]
	}
	fmt.Fprintln(p.out, s)
}

// Step prints the header of step k (1-based).
func (p *progressWriter) Step(k int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stepLocked(k)
}

func (p *progressWriter) stepLocked(k int) {
	title := "?"
	if k >= 1 && k <= len(p.steps) {
		title = p.steps[k-1].title
	}
	fmt.Fprintf(p.out, "[%d/%d] %s… (%s elapsed)\n", k, len(p.steps), title, p.Elapsed())
}

// Printf writes one line of its own.
func (p *progressWriter) Printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

// Elapsed is the time since the build started, rounded to 0.1 s.
func (p *progressWriter) Elapsed() time.Duration {
	return time.Since(p.start).Round(100 * time.Millisecond)
}

// Tail returns the last output lines (including an unterminated one), joined.
func (p *progressWriter) Tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	lines := append([]string(nil), p.tail...)
	if len(p.buf) > 0 {
		lines = append(lines, string(p.buf))
	}
	return strings.Join(lines, "\n")
}
