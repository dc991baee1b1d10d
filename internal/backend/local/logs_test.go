package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.log")
	content := `{"time":"2026-01-02T03:04:05Z","level":"INFO","msg":"starting"}
{"time":"2026-01-02T03:04:06Z","level":"INFO","msg":"listening","addr":"0.0.0.0:49983"}
plain text line

{"time":"2026-01-02T03:04:08Z","level":"WARN","msg":"late"}
`
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := readLogTail(p, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 || !strings.Contains(all[1].Line, "listening") || all[2].Line != "plain text line" {
		t.Fatalf("lines = %+v", all)
	}
	if !all[0].Timestamp.Equal(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("timestamp = %v", all[0].Timestamp)
	}
	since, err := readLogTail(p, time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC), 2)
	if err != nil {
		t.Fatal(err)
	}
	// "listening", the plain line (mtime, now) and "late" match; limit keeps the last two.
	if len(since) != 2 || since[0].Line != "plain text line" || !strings.Contains(since[1].Line, "late") {
		t.Fatalf("since/limit lines = %+v", since)
	}
}

func TestReadLogTailBounded(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent.log")
	line := strings.Repeat("x", 1023) + "\n"
	if err := os.WriteFile(p, []byte(strings.Repeat(line, 2*maxLogTail/len(line))), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := readLogTail(p, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got); n == 0 || n > maxLogTail/len(line) {
		t.Fatalf("read %d lines, want at most %d", n, maxLogTail/len(line))
	}
	for _, l := range got {
		if len(l.Line) != 1023 {
			t.Fatalf("partial line of %d bytes", len(l.Line))
		}
	}
}

func TestReadLogTailMissing(t *testing.T) {
	if _, err := readLogTail(filepath.Join(t.TempDir(), "nope"), time.Time{}, 0); err == nil {
		t.Fatal("missing log: want an error")
	}
}
