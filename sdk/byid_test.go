package sdk

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestByIDCalls checks the requests and decoding of the by-ID and template
// calls against a recording server.
func TestByIDCalls(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" key="+r.Header.Get("X-API-KEY"))
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/templates":
			_, _ = io.WriteString(w, `[{"templateID":"t1","buildID":"b1","aliases":["base"],"names":["base"],"cpuCount":2,
				"memoryMB":512,"diskSizeMB":1024,"public":true,"createdAt":"2024-01-02T03:04:05Z","updatedAt":"2024-01-02T03:04:05Z",
				"envdVersion":"0.2.0","buildStatus":"ready","sizeBytes":7}]`)
		case "/templates/t1/builds/b1/status":
			_, _ = io.WriteString(w, `{"templateID":"t1","buildID":"b1","status":"ready","logs":["x"],
				"logEntries":[{"timestamp":"2024-01-02T03:04:05Z","level":"info","message":"x"}]}`)
		case "/templates/t1/builds/nope/status", "/sandboxes/gone/logs":
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code":404,"message":"not found"}`)
		case "/sandboxes/s1/logs":
			_, _ = io.WriteString(w, `{"logs":[],"logEntries":[{"timestamp":"2024-01-02T03:04:05Z","level":"warn","message":"m","fields":{"a":"b"}}]}`)
		case "/sandboxes/s1/timeout", "/sandboxes/s1/pause":
			w.WriteHeader(http.StatusNoContent)
		case "/sandboxes/s1/metrics":
			_, _ = io.WriteString(w, `[{"timestamp":"2024-01-02T03:04:05Z","timestampUnix":1704164645,"cpuCount":2,"cpuUsedPct":12.5,
				"memUsed":1,"memTotal":2,"memCache":0,"diskUsed":3,"diskTotal":4}]`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	conn := ConnectionOptions{APIURL: srv.URL, APIKey: "k"}
	ctx := context.Background()

	tpls, err := ListTemplates(ctx, &conn)
	if err != nil || len(tpls) != 1 || tpls[0].BuildID != "b1" || tpls[0].SizeBytes != 7 || tpls[0].Aliases[0] != "base" ||
		tpls[0].BuildStatus != "ready" || tpls[0].CreatedAt.Year() != 2024 {
		t.Fatalf("ListTemplates = %+v, %v", tpls, err)
	}
	b, err := GetTemplateBuild(ctx, "t1", "b1", &TemplateBuildOptions{ConnectionOptions: conn, LogsOffset: 3, Limit: 2})
	if err != nil || b.Status != "ready" || len(b.Logs) != 1 || b.Logs[0].Message != "x" {
		t.Fatalf("GetTemplateBuild = %+v, %v", b, err)
	}
	var nf *NotFoundError
	if _, err := GetTemplateBuild(ctx, "t1", "nope", &TemplateBuildOptions{ConnectionOptions: conn}); !errors.As(err, &nf) || nf.Resource != ResourceTemplate {
		t.Fatalf("unknown build: %v", err)
	}
	logs, err := GetLogs(ctx, "s1", &LogsOptions{ConnectionOptions: conn, Start: time.UnixMilli(1234), Limit: 5})
	if err != nil || len(logs) != 1 || logs[0].Level != "warn" || logs[0].Fields["a"] != "b" {
		t.Fatalf("GetLogs = %+v, %v", logs, err)
	}
	if _, err := GetLogs(ctx, "gone", &LogsOptions{ConnectionOptions: conn}); !errors.As(err, &nf) || nf.Resource != ResourceSandbox {
		t.Fatalf("logs of an unknown sandbox: %v", err)
	}
	ms, err := GetMetrics(ctx, "s1", &MetricsOptions{Start: time.Unix(100, 0)}, &conn)
	if err != nil || len(ms) != 1 || ms[0].CPUUsedPct != 12.5 || ms[0].DiskTotal != 4 {
		t.Fatalf("GetMetrics = %+v, %v", ms, err)
	}
	if err := SetTimeout(ctx, "s1", 90*time.Second, &conn); err != nil {
		t.Fatal(err)
	}
	if ok, err := Pause(ctx, "s1", nil, &conn); err != nil || !ok {
		t.Fatalf("Pause = %v, %v", ok, err)
	}
	want := []string{
		"GET /templates key=k",
		"GET /templates/t1/builds/b1/status?logsOffset=3&limit=2 key=k",
		"GET /templates/t1/builds/nope/status key=k",
		"GET /sandboxes/s1/logs?start=1234&limit=5 key=k",
		"GET /sandboxes/gone/logs key=k",
		"GET /sandboxes/s1/metrics?start=100 key=k",
		"POST /sandboxes/s1/timeout key=k",
		"POST /sandboxes/s1/pause key=k",
	}
	if len(seen) != len(want) {
		t.Fatalf("requests = %q", seen)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Errorf("request %d = %q, want %q", i, seen[i], want[i])
		}
	}
}
