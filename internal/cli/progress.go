package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progressMin is the smallest transfer that gets a progress bar (bytes).
const progressMin = 1 << 20

// progressEvery throttles redraws of the bar.
const progressEvery = 100 * time.Millisecond

// progressWidth is the number of cells of the bar itself.
const progressWidth = 30

// progress draws a one-line progress bar of a transfer on a terminal: it
// counts the bytes passing through Reader and redraws at most every
// progressEvery, then Done draws the final state and ends the line.
type progress struct {
	w     io.Writer
	label string
	total int64 // bytes; <= 0 when unknown
	now   func() time.Time

	mu    sync.Mutex
	done  int64
	start time.Time
	last  time.Time
}

// newProgress returns a bar for a transfer of total bytes (<= 0: unknown)
// drawn on w.
func newProgress(w io.Writer, label string, total int64) *progress {
	p := &progress{w: w, label: label, total: total, now: time.Now}
	p.start = p.now()
	return p
}

// Reader wraps r so reads advance the bar.
func (p *progress) Reader(r io.Reader) io.Reader { return &progressReader{r: r, p: p} }

// Writer wraps w so writes advance the bar.
func (p *progress) Writer(w io.Writer) io.Writer { return &progressWriter{w: w, p: p} }

// add records n more bytes and redraws when due.
func (p *progress) add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += int64(n)
	if t := p.now(); t.Sub(p.last) >= progressEvery {
		p.last = t
		fmt.Fprint(p.w, "\r"+renderProgress(p.label, p.done, p.total, t.Sub(p.start)))
	}
}

// Done draws the final state and a newline.
func (p *progress) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprint(p.w, "\r"+renderProgress(p.label, p.done, p.total, p.now().Sub(p.start))+"\n")
}

// renderProgress renders "label [=====>    ]  42%  1.2 MiB / 3.0 MiB  5.0 MiB/s"
// (without a bar and percentage when total is unknown).
func renderProgress(label string, done, total int64, elapsed time.Duration) string {
	rate := ""
	if s := elapsed.Seconds(); s > 0 {
		rate = "  " + humanBytes(int64(float64(done)/s)) + "/s"
	}
	if total <= 0 {
		return fmt.Sprintf("%s  %s%s", label, humanBytes(done), rate)
	}
	frac := min(float64(done)/float64(total), 1)
	filled := int(frac * progressWidth)
	bar := strings.Repeat("=", filled)
	if filled < progressWidth {
		bar += ">" + strings.Repeat(" ", progressWidth-filled-1)
	}
	return fmt.Sprintf("%s [%s] %3.0f%%  %s / %s%s", label, bar, frac*100, humanBytes(done), humanBytes(total), rate)
}

type progressReader struct {
	r io.Reader
	p *progress
}

func (pr *progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	pr.p.add(n)
	return n, err
}

type progressWriter struct {
	w io.Writer
	p *progress
}

func (pw *progressWriter) Write(b []byte) (int, error) {
	n, err := pw.w.Write(b)
	pw.p.add(n)
	return n, err
}
