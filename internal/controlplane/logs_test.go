package controlplane

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/backend"
)

func TestSandboxLogs(t *testing.T) {
	h := newHarness(t, Config{})
	t0 := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	h.fake.logLines = []backend.LogLine{
		{Timestamp: t0, Line: `{"time":"2026-03-04T05:06:07Z","level":"INFO","msg":"listening","addr":"0.0.0.0:49983","port":49983}`},
		{Timestamp: t0.Add(time.Second), Line: "panic: not json"},
		{Timestamp: t0.Add(2 * time.Second), Source: "sandbox", Line: `{"time":"2026-03-04T05:06:09Z","level":"ERROR","msg":"boom","err":"x","source":"host"}`},
	}
	id := h.create(map[string]any{"templateID": "base"})

	r := h.do("GET", "/sandboxes/"+id+"/logs", nil)
	if r.status != http.StatusOK {
		t.Fatalf("logs: %d %s", r.status, r.body)
	}
	var got api.SandboxLogs
	r.json(t, &got)
	if len(got.Logs) != 3 || got.Logs[1].Line != "panic: not json" || !got.Logs[0].Timestamp.Equal(t0) {
		t.Fatalf("logs = %+v", got.Logs)
	}
	if len(got.LogEntries) != 2 {
		t.Fatalf("logEntries = %+v", got.LogEntries)
	}
	e := got.LogEntries[0]
	if e.Message != "listening" || e.Level != api.SandboxLogEntryLevelInfo || e.Fields["addr"] != "0.0.0.0:49983" || e.Fields["port"] != "49983" {
		t.Fatalf("entry = %+v", e)
	}
	if _, ok := e.Fields["msg"]; ok {
		t.Fatalf("msg repeated in fields: %+v", e.Fields)
	}
	if got.LogEntries[1].Level != api.SandboxLogEntryLevelError || got.LogEntries[1].Fields["source"] != "sandbox" {
		t.Fatalf("level = %q, source %q (the backend's source wins)", got.LogEntries[1].Level, got.LogEntries[1].Fields["source"])
	}

	start := t0.Add(time.Second).UnixMilli()
	r = h.do("GET", fmt.Sprintf("/sandboxes/%s/logs?start=%d&limit=1", id, start), nil)
	r.json(t, &got)
	if r.status != http.StatusOK || len(got.Logs) != 1 || got.LogEntries[0].Message != "boom" {
		t.Fatalf("start+limit: %d %s", r.status, r.body)
	}
}

func TestSandboxLogsErrors(t *testing.T) {
	h := newHarness(t, Config{})
	wantError(t, h.do("GET", "/sandboxes/aaaaaaaaaaaaaaaaaaaa/logs", nil), http.StatusNotFound)
	wantError(t, h.do("GET", "/sandboxes/bad/logs", nil), http.StatusNotFound)
	id := h.create(map[string]any{"templateID": "base"})
	msg := wantError(t, h.do("GET", "/sandboxes/"+id+"/logs?limit=-1", nil), http.StatusBadRequest)
	if !strings.Contains(msg, "limit") {
		t.Fatalf("message %q", msg)
	}
	wantError(t, h.do("GET", "/sandboxes/"+id+"/logs?start=soon", nil), http.StatusBadRequest)
	if r := h.do("DELETE", "/sandboxes/"+id, nil); r.status != http.StatusNoContent {
		t.Fatalf("kill: %d", r.status)
	}
	wantError(t, h.do("GET", "/sandboxes/"+id+"/logs", nil), http.StatusNotFound)
}

func TestLogQueryLimit(t *testing.T) {
	for _, c := range []struct {
		in   *int32
		want int
	}{{nil, defaultLogLimit}, {ptr[int32](0), defaultLogLimit}, {ptr[int32](5), 5}, {ptr[int32](1 << 30), maxLogLimit}} {
		_, got, err := logQuery(api.GetSandboxLogsParams{Limit: c.in})
		if err != nil || got != c.want {
			t.Errorf("limit %v: got %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
