package initproc

import (
	"bufio"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func pipe(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// TestOutputNeverBlocks fills the pipe nobody reads: writes return at once,
// the lines are dropped and counted, and the count is reported once the pipe
// has room again.
func TestOutputNeverBlocks(t *testing.T) {
	r, w := pipe(t)
	if _, err := unix.FcntlInt(w.Fd(), unix.F_SETPIPE_SZ, 4096); err != nil {
		t.Fatal(err)
	}
	out, err := newOutput(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("z", 1000))
	start := time.Now()
	for range 100 {
		out.Line(line)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("100 lines into a full pipe took %v", d)
	}
	if out.dropped == 0 {
		t.Fatal("nothing dropped")
	}
	dropped := out.dropped
	rfd := int(r.Fd()) // r is blocking from here on
	unix.SetNonblock(rfd, true)
	buf := make([]byte, 1<<16)
	for { // empty the pipe
		if n, _ := unix.Read(rfd, buf); n <= 0 {
			break
		}
	}
	unix.SetNonblock(rfd, false)
	out.Printf("after %d", 1)
	sc := bufio.NewScanner(r)
	var got []string
	for len(got) < 2 && sc.Scan() {
		if sc.Text() != "" {
			got = append(got, sc.Text())
		}
	}
	if len(got) != 2 || !strings.Contains(got[0], " lines of output dropped") || got[1] != "after 1" {
		t.Fatalf("after emptying: %q (dropped %d)", got, dropped)
	}
}

// TestOutputWithoutReader: with no reader (the server restarting) a write
// fails with EPIPE and the process survives (CatchSIGPIPE).
func TestOutputWithoutReader(t *testing.T) {
	CatchSIGPIPE()
	r, w := pipe(t)
	r.Close()
	out, err := newOutput(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	out.Line([]byte("lost"))
	if out.dropped != 1 {
		t.Fatalf("dropped = %d", out.dropped)
	}
	if _, err := w.Write([]byte("x")); err == nil || !strings.Contains(err.Error(), syscall.EPIPE.Error()) {
		t.Fatalf("write to a pipe without reader: %v", err)
	}
}

// TestRelay: lines start on a line of their own, long lines are split, blank
// lines dropped.
func TestRelay(t *testing.T) {
	agentR, agentW := pipe(t)
	outR, outW := pipe(t)
	out, err := newOutput(int(outW.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	go relay(agentR, out)
	long := strings.Repeat("l", maxLine+10)
	agentW.WriteString("one\r\n\n" + long + "\ntwo\n")
	agentW.Close()
	sc := bufio.NewScanner(outR)
	sc.Buffer(nil, 2*maxLine)
	var got []string
	for len(got) < 4 && sc.Scan() {
		if sc.Text() != "" {
			got = append(got, sc.Text())
		}
	}
	if len(got) != 4 || got[0] != "one" || got[1] != long[:maxLine] || got[2] != long[maxLine:] || got[3] != "two" {
		t.Fatalf("relayed %d lines: %.40q", len(got), got)
	}
}
