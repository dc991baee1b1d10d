package integration

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestObservability: GET /metrics (no API key) counts a created sandbox as
// running, and GET /sandboxes/{id}/logs returns the agent's "listening" record.
func TestObservability(t *testing.T) {
	s := startServer(t)
	sb := s.create(t, nil)

	resp, err := http.Get("http://" + s.Addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	if !hasLine(string(body), `cubby_sandboxes{state="running"} 1`) {
		t.Errorf("/metrics lacks the running sandbox:\n%s", body)
	}
	if !hasLine(string(body), `cubby_api_requests_total{code="201",route="POST /v2/sandboxes"} 1`) {
		t.Errorf("/metrics lacks the create request:\n%s", body)
	}
	// The template label is the base template's generated ID.
	if !strings.Contains(string(body), `cubby_sandbox_create_duration_seconds_count{outcome="ok",template="`) {
		t.Errorf("/metrics lacks the create latency:\n%s", body)
	}

	logs := s.logs(t, sb.ID)
	found := false
	for _, e := range logs.LogEntries {
		if e.Message == "listening" && e.Level == "info" && e.Fields["addr"] != "" {
			found = true
		}
	}
	if !found || len(logs.Logs) < len(logs.LogEntries) {
		t.Fatalf("no \"listening\" entry in logs: %+v", logs)
	}
}

// sandboxLogs is the body of GET /sandboxes/{id}/logs (E2B SandboxLogs).
type sandboxLogs struct {
	Logs []struct {
		Timestamp string `json:"timestamp"`
		Line      string `json:"line"`
	} `json:"logs"`
	LogEntries []logEntry `json:"logEntries"`
}

// logEntry is one structured record of sandboxLogs.
type logEntry struct {
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields"`
}

// logs fetches the sandbox's logs (agent and kernel records).
func (s *server) logs(t *testing.T, id string) sandboxLogs {
	t.Helper()
	var logs sandboxLogs
	if code := s.api("GET", "/sandboxes/"+id+"/logs", nil, &logs); code != 200 {
		t.Fatalf("logs: %d", code)
	}
	return logs
}

func hasLine(text, line string) bool {
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			return true
		}
	}
	return false
}
