package controlplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/backend"
)

// Bounds of GET /sandboxes/{id}/logs `limit` (lines).
const (
	defaultLogLimit = 1000
	maxLogLimit     = 10000
)

// GetSandboxLogs implements GET /sandboxes/{id}/logs?start&limit: the sandbox's
// output, the host's records about it and its kernels' log lines
// (backend.Backend.Logs), each labelled with its source, stamped at or after start
// (unix ms), the last limit of them (0 or
// absent: 1000; capped at 10000), as
// E2B's SandboxLogs {"logs":[{timestamp,line}],"logEntries":[{timestamp,level,message,fields}]}.
// 404 for unknown or killed sandboxes; 400 for a negative limit.
func (h httpAPI) GetSandboxLogs(w http.ResponseWriter, r *http.Request, id api.SandboxID, p api.GetSandboxLogsParams) {
	if !h.ready(w) {
		return
	}
	if _, err := h.liveRecord(r, id); err != nil {
		h.fail(w, r, err)
		return
	}
	since, limit, err := logQuery(p)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	lines, err := h.s.backend.Logs(r.Context(), id, since, limit)
	if errors.Is(err, backend.ErrNotFound) {
		err = sandboxNotFound(id)
	}
	if err != nil {
		h.fail(w, r, fmt.Errorf("sandbox %s logs: %w", id, err))
		return
	}
	writeJSON(w, http.StatusOK, logsView(lines))
}

// logQuery validates the logs query parameters.
func logQuery(p api.GetSandboxLogsParams) (since time.Time, limit int, err error) {
	limit = defaultLogLimit
	if p.Limit != nil {
		switch {
		case *p.Limit < 0:
			return time.Time{}, 0, badRequest("limit must not be negative")
		case *p.Limit > 0:
			limit = min(int(*p.Limit), maxLogLimit)
		}
	}
	if p.Start != nil {
		since = time.UnixMilli(*p.Start)
	}
	return since, limit, nil
}

// logsView converts raw lines into both E2B shapes: every line in `logs`, and
// the lines that are JSON log records (log/slog's JSON handler: time, level,
// msg, other attributes) in `logEntries`, whose "source" field is the source
// the backend gives (host, sandbox or kernel), whatever the record says.
func logsView(lines []backend.LogLine) api.SandboxLogs {
	out := api.SandboxLogs{Logs: []api.SandboxLog{}, LogEntries: []api.SandboxLogEntry{}}
	for _, l := range lines {
		out.Logs = append(out.Logs, api.SandboxLog{Timestamp: l.Timestamp.UTC(), Line: l.Line})
		if e, ok := logEntry(l); ok {
			out.LogEntries = append(out.LogEntries, e)
		}
	}
	return out
}

// logEntry parses one JSON log record; ok is false for other lines.
func logEntry(l backend.LogLine) (api.SandboxLogEntry, bool) {
	var rec map[string]any
	if !strings.HasPrefix(l.Line, "{") || json.Unmarshal([]byte(l.Line), &rec) != nil {
		return api.SandboxLogEntry{}, false
	}
	e := api.SandboxLogEntry{Timestamp: l.Timestamp.UTC(), Level: logLevel(rec["level"]), Fields: map[string]string{}}
	if msg, ok := rec["msg"].(string); ok {
		e.Message = msg
	}
	for k, v := range rec {
		if k == "time" || k == "level" || k == "msg" {
			continue
		}
		if s, ok := v.(string); ok {
			e.Fields[k] = s
		} else if b, err := json.Marshal(v); err == nil {
			e.Fields[k] = string(b)
		}
	}
	if l.Source != "" {
		e.Fields["source"] = l.Source
	}
	return e, true
}

// logLevel maps slog level names ("DEBUG", "INFO", "WARN", "ERROR", possibly
// with an offset like "INFO+2") to the API enum; unknown levels are info.
func logLevel(v any) api.SandboxLogEntryLevel {
	s, _ := v.(string)
	switch {
	case strings.HasPrefix(s, "DEBUG"):
		return api.SandboxLogEntryLevelDebug
	case strings.HasPrefix(s, "WARN"):
		return api.SandboxLogEntryLevelWarn
	case strings.HasPrefix(s, "ERROR"):
		return api.SandboxLogEntryLevelError
	default:
		return api.SandboxLogEntryLevelInfo
	}
}
