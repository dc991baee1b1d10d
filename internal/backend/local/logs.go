package local

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/logfile"
	"github.com/cubby-dev/cubby/internal/sandboxlog"
)

// Bounds of what Logs reads.
const (
	maxLogTail       = 1 << 20   // bytes at the end of the output log (and its predecessor)
	maxKernelLogTail = 256 << 10 // bytes at the end of each kernel log
	maxKernelLogs    = 16        // most recently written kernel logs
	maxKernelLogDir  = 4096      // directory entries looked at
)

// Logs implements backend.Backend: the last maxLogTail bytes of the sandbox's
// output log (sandboxlog.Read: its stdout/stderr and the host's records, stamped
// by the host) merged by timestamp with the last maxKernelLogTail bytes of each
// of the maxKernelLogs most recently written kernel logs in
// agentapi.KernelLogDir of the sandbox rootfs; of those, the last limit lines
// stamped at or after since. Every line is labelled with its source. Kernel
// logs live in a tree the sandbox controls: they are opened beneath the rootfs
// only (os.Root), must be regular files, and are skipped when unreadable (a
// paused sandbox without a mounted rootfs has none).
func (b *Backend) Logs(_ context.Context, id string, since time.Time, limit int) ([]backend.LogLine, error) {
	s, err := b.get(id)
	if err != nil {
		return nil, err
	}
	return sandboxLogs(b.sandboxDir(id), b.disk(s).Rootfs, since, limit)
}

// sandboxLogs implements Logs for the sandbox directory dir and the rootfs at
// rootDir.
func sandboxLogs(dir, rootDir string, since time.Time, limit int) ([]backend.LogLine, error) {
	out, err := sandboxlog.Read(dir, maxLogTail)
	if err != nil {
		return nil, err
	}
	lines := make([]backend.LogLine, 0, len(out))
	for _, l := range out {
		lines = append(lines, backend.LogLine{Timestamp: l.Time, Source: l.Source, Line: l.Text})
	}
	lines = append(lines, kernelLogs(rootDir)...)
	slices.SortStableFunc(lines, func(x, y backend.LogLine) int { return x.Timestamp.Compare(y.Timestamp) })
	return filterLines(lines, since, limit), nil
}

// kernelLogs reads the kernel logs beneath the rootfs at dir (see Logs); every
// failure just leaves a file (or all of them) out.
func kernelLogs(dir string) []backend.LogLine {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil
	}
	defer func() { _ = root.Close() }()
	logDir := strings.TrimPrefix(agentapi.KernelLogDir, "/")
	d, err := root.Open(logDir)
	if err != nil {
		return nil
	}
	entries, _ := d.ReadDir(maxKernelLogDir)
	_ = d.Close()
	type logFile struct {
		name  string
		mtime time.Time
	}
	var files []logFile
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		if fi, err := e.Info(); err == nil {
			files = append(files, logFile{e.Name(), fi.ModTime()})
		}
	}
	slices.SortFunc(files, func(x, y logFile) int { return cmp.Compare(y.mtime.UnixNano(), x.mtime.UnixNano()) })
	var out []backend.LogLine
	for _, f := range files[:min(len(files), maxKernelLogs)] {
		out = append(out, readKernelLog(root, path.Join(logDir, f.name))...)
	}
	return out
}

// readKernelLog reads one kernel log's tail; nil unless it is a regular file
// (opened without following a final symlink and without blocking on a FIFO).
func readKernelLog(root *os.Root, name string) []backend.LogLine {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	data, err := logfile.Tail(f, fi.Size(), maxKernelLogTail)
	if err != nil {
		return nil
	}
	return splitLines(data, fi.ModTime())
}

// splitLines splits the kernel log data into non-blank LogLines labelled
// "kernel" and stamped with their JSON "time" field; a line without one takes
// the time of the line before it (leading ones the first stamped time after
// them, or mtime when no line has one).
func splitLines(data []byte, mtime time.Time) []backend.LogLine {
	out := []backend.LogLine{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxLogTail)
	var prev time.Time
	leading := 0 // lines before the first stamped one
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		ts, ok := lineTime(sc.Bytes())
		switch {
		case ok:
			if prev.IsZero() {
				for i := range out[:leading] {
					out[i].Timestamp = ts
				}
			}
			prev = ts
		case prev.IsZero():
			leading++
		default:
			ts = prev
		}
		out = append(out, backend.LogLine{Timestamp: ts, Source: sandboxlog.SourceKernel,
			Line: sandboxlog.Label(sc.Text(), sandboxlog.SourceKernel)})
	}
	if prev.IsZero() {
		for i := range out {
			out[i].Timestamp = mtime
		}
	}
	return out
}

// filterLines returns the last limit of lines (0 = all) stamped at or after
// since (zero = all).
func filterLines(lines []backend.LogLine, since time.Time, limit int) []backend.LogLine {
	out := lines[:0:0]
	for _, l := range lines {
		if since.IsZero() || !l.Timestamp.Before(since) {
			out = append(out, l)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// lineTime returns the "time" field (RFC 3339, as log/slog's JSON handler
// writes it) of a JSON log record; ok is false for other lines.
func lineTime(line []byte) (time.Time, bool) {
	var rec struct {
		Time time.Time `json:"time"`
	}
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &rec) != nil || rec.Time.IsZero() {
		return time.Time{}, false
	}
	return rec.Time, true
}
