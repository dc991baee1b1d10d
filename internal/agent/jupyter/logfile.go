package jupyter

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// cappedLog appends to a file and keeps it below max bytes: a write that would
// cross the limit truncates the file first and starts it with a marker line, so the
// file always holds the most recent output.
type cappedLog struct {
	mu  sync.Mutex
	f   *os.File
	max int64
	n   int64
}

// openCappedLog opens (appending) or creates path with mode 0600.
func openCappedLog(path string, max int64) (*cappedLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open kernel log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat kernel log: %w", err)
	}
	return &cappedLog{f: f, max: max, n: st.Size()}, nil
}

// Write implements io.Writer; it never fails short (errors of the file are returned).
func (l *cappedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if int64(len(p)) > l.max/2 {
		p = p[int64(len(p))-l.max/2:]
	}
	if l.n+int64(len(p)) > l.max {
		if err := l.f.Truncate(0); err != nil {
			return 0, fmt.Errorf("truncate kernel log: %w", err)
		}
		m, _ := io.WriteString(l.f, "[log truncated]\n")
		l.n = int64(m)
	}
	m, err := l.f.Write(p)
	l.n += int64(m)
	if err != nil {
		return m, fmt.Errorf("write kernel log: %w", err)
	}
	return n, nil
}

// Close closes the file.
func (l *cappedLog) Close() error { return l.f.Close() }
