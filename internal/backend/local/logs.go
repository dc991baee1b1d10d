package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
)

// maxLogTail is how many bytes at the end of agent.log Logs reads (1 MiB).
const maxLogTail = 1 << 20

// Logs implements backend.Backend: it reads at most the last maxLogTail bytes of
// <dir>/<id>/agent.log, splits them into lines and keeps the last limit lines
// stamped at or after since. A first partial line of the tail is dropped.
func (b *Backend) Logs(_ context.Context, id string, since time.Time, limit int) ([]backend.LogLine, error) {
	if _, err := b.get(id); err != nil {
		return nil, err
	}
	return readLogTail(b.logPath(id), since, limit)
}

// readLogTail implements Logs on the log file at path.
func readLogTail(path string, since time.Time, limit int) ([]backend.LogLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open agent log: %w", err)
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat agent log: %w", err)
	}
	off := max(fi.Size()-maxLogTail, 0)
	data, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return nil, fmt.Errorf("read agent log: %w", err)
	}
	if off > 0 {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return filterLines(data, fi.ModTime(), since, limit), nil
}

// filterLines splits data into LogLines (timestamps from the JSON "time" field,
// else mtime) and returns the last limit of those at or after since.
func filterLines(data []byte, mtime, since time.Time, limit int) []backend.LogLine {
	out := []backend.LogLine{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxLogTail)
	for sc.Scan() {
		line := sc.Text()
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		ts := lineTime(sc.Bytes(), mtime)
		if !since.IsZero() && ts.Before(since) {
			continue
		}
		out = append(out, backend.LogLine{Timestamp: ts, Line: line})
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// lineTime returns the "time" field (RFC 3339, as log/slog's JSON handler
// writes it) of a JSON log record, or def.
func lineTime(line []byte, def time.Time) time.Time {
	var rec struct {
		Time time.Time `json:"time"`
	}
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &rec) != nil || rec.Time.IsZero() {
		return def
	}
	return rec.Time
}
