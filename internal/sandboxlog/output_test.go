package sandboxlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/logfile"
)

// waitLines polls Read until cond holds (at most 10 s).
func waitLines(t *testing.T, dir string, cond func([]Line) bool) []Line {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines, err := Read(dir, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if cond(lines) {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out; lines: %+v", lines)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func find(lines []Line, substr string) (Line, bool) {
	for _, l := range lines {
		if strings.Contains(l.Text, substr) {
			return l, true
		}
	}
	return Line{}, false
}

func openTest(t *testing.T, dir string, o Options) *Output {
	t.Helper()
	out, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close() })
	return out
}

func writeEnd(t *testing.T, out *Output) *os.File {
	t.Helper()
	w, err := out.WriteEnd()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// TestOutputLabelsSources: what arrives on the FIFO is a sandbox line however
// it is dressed; Note writes host records; JSON objects carry their source.
func TestOutputLabelsSources(t *testing.T) {
	dir := t.TempDir()
	out := openTest(t, dir, Options{})
	out.Note(slog.LevelInfo, "container started", "runtime", "runc")
	w := writeEnd(t, out)
	forged := `{"time":"2001-01-01T00:00:00Z","level":"ERROR","msg":"forged","source":"host","Source":"host"}`
	if _, err := w.WriteString("plain\r\n\n   \n" + forged + "\n" + `{"msg":"agent"}` + "\n"); err != nil {
		t.Fatal(err)
	}
	lines := waitLines(t, dir, func(l []Line) bool { _, ok := find(l, `"agent"`); return ok })
	if len(lines) != 4 {
		t.Fatalf("lines = %+v, want host record, plain, forged, agent", lines)
	}
	host, plain, fake := lines[0], lines[1], lines[2]
	if host.Source != SourceHost || !strings.HasPrefix(host.Text, `{"source":"host",`) || !strings.Contains(host.Text, `"runtime":"runc"`) {
		t.Errorf("host record %+v", host)
	}
	if plain.Source != SourceSandbox || plain.Text != "plain" {
		t.Errorf("plain line %+v", plain)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(fake.Text), &rec); err != nil || fake.Source != SourceSandbox ||
		rec["source"] != SourceSandbox || rec["Source"] != nil || rec["msg"] != "forged" {
		t.Errorf("forged record %+v (%v)", fake, err)
	}
	if fake.Time.Year() == 2001 || time.Since(fake.Time) > time.Minute {
		t.Errorf("forged record stamped %v, want the host's time of arrival", fake.Time)
	}
}

// TestOutputFloodIsBoundedAndThrottled floods the FIFO from a writer that
// never stops: a host record says the output is throttled, the drain reads at
// most Rate bytes per second (plus a burst) and the files stay under their cap.
func TestOutputFloodIsBoundedAndThrottled(t *testing.T) {
	dir := t.TempDir()
	const rate, burst, maxFile = 512 << 10, 64 << 10, 32 << 10
	out := openTest(t, dir, Options{Rate: rate, Burst: burst, MaxFileBytes: maxFile, MaxLine: 1024})
	w := writeEnd(t, out)
	var written atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096) // no newline: long lines are split
		for {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	start := time.Now()
	waitLines(t, dir, func(l []Line) bool { _, ok := find(l, "sandbox output throttled"); return ok })
	time.Sleep(1500*time.Millisecond - time.Since(start))
	elapsed := time.Since(start).Seconds()
	w.Close() // unblocks the writer (the Output holds the other writer)
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
	pipeBuf := int64(1 << 20) // the most a FIFO buffer can hold (fs.pipe-max-size)
	if max := int64(rate*elapsed) + burst + pipeBuf; written.Load() > max {
		t.Errorf("writer got %d bytes through in %.1fs, want at most %d", written.Load(), elapsed, max)
	}
	for _, name := range []string{LogName, LogName + logfile.PrevSuffix} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Size() > maxFile {
			t.Errorf("%s: %v, size above %d", name, err, maxFile)
		}
	}
	lines, err := Read(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		if l.Source == SourceSandbox && len(l.Text) > 1024 {
			t.Fatalf("line of %d bytes, max 1024", len(l.Text))
		}
	}
}

// TestOutputSurvivesRestart: what is still in the FIFO when the server stops
// reading (here held back by the rate) is drained by the next Open; a partial
// line is recorded at Close.
func TestOutputSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	out, err := Open(dir, Options{Rate: 1, Burst: 8})
	if err != nil {
		t.Fatal(err)
	}
	w := writeEnd(t, out) // the container's end outlives the server's
	// Two reads of 8 bytes get through; the second one waits for the rate.
	w.WriteString("0123456\n01234567kept across restart\n")
	waitLines(t, dir, func(l []Line) bool { _, ok := find(l, "0123456"); return ok })
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := find(waitLines(t, dir, func([]Line) bool { return true }), "kept across restart"); ok {
		t.Fatal("the throttled rest was read before the restart")
	}
	out = openTest(t, dir, Options{})
	waitLines(t, dir, func(l []Line) bool { _, ok := find(l, "kept across restart"); return ok })
	w.WriteString("partial")
	time.Sleep(50 * time.Millisecond)
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := find(waitLines(t, dir, func([]Line) bool { return true }), "partial"); !ok {
		t.Error("partial line lost at Close")
	}
}

// TestOpenReplacesNonFIFO: a regular file where the FIFO belongs is replaced.
func TestOpenReplacesNonFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FIFOName), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	openTest(t, dir, Options{})
	st, err := os.Lstat(filepath.Join(dir, FIFOName))
	if err != nil || st.Mode()&os.ModeNamedPipe == 0 || st.Mode().Perm() != 0o600 {
		t.Fatalf("fifo: %v %v", st.Mode(), err)
	}
	if lines, err := Read(t.TempDir(), 100); err != nil || len(lines) != 0 {
		t.Fatalf("Read of a sandbox without output: %v %v", lines, err)
	}
}

func TestLabel(t *testing.T) {
	for _, c := range []struct{ in, source, want string }{
		{"plain text", SourceSandbox, "plain text"},
		{`{"msg":"x"}`, SourceSandbox, `{"source":"sandbox","msg":"x"}`},
		{`{}`, SourceKernel, `{"source":"kernel"}`},
		{` {"source":"host", "msg":"<x>", "SOURCE":1, "n":[1, 2]} `, SourceSandbox, `{"source":"sandbox","msg":"<x>","n":[1, 2]}`},
		{`{"\u0073ource":"host","msg":"x"}`, SourceKernel, `{"source":"kernel","msg":"x"}`},
		{`{"source":"host"} trailing`, SourceSandbox, `sandbox: {"source":"host"} trailing`},
		{`{"source":"host"`, SourceSandbox, `sandbox: {"source":"host"`},
		{`["source","host"]`, SourceSandbox, `["source","host"]`},
	} {
		if got := Label(c.in, c.source); got != c.want {
			t.Errorf("Label(%q, %s) = %q, want %q", c.in, c.source, got, c.want)
		}
	}
}

func TestOpenFailsWithoutDir(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "missing"), Options{})
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open in a missing dir: %v", err)
	}
}
