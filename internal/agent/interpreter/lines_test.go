package interpreter

import (
	"net/http/httptest"
	"testing"

	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

// TestStreamFlushes checks which lines are flushed at once (those a client
// acts on) and which are buffered (number_of_executions until the next
// flushed line, end_of_execution until the handler returns), that the bytes
// are the same either way, and that no keepalive follows the end.
func TestStreamFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	s := newStream(rec, nil)
	s.start()
	if !rec.Flushed {
		t.Fatal("headers not flushed at start")
	}
	rec.Flushed = false
	s.executions(1)
	if rec.Flushed {
		t.Fatal("number_of_executions was flushed on its own")
	}
	s.output(execapi.TypeStdout, "hi\n", "2026-01-01T00:00:00.000000Z")
	if !rec.Flushed {
		t.Fatal("stdout line not flushed")
	}
	rec.Flushed = false
	s.end()
	s.keepalive(0)
	if rec.Flushed {
		t.Fatal("end_of_execution (or a keepalive after it) was flushed")
	}
	want := `{"execution_count":1,"type":"number_of_executions"}` + "\n" +
		`{"text":"hi\n","timestamp":"2026-01-01T00:00:00.000000Z","type":"stdout"}` + "\n" +
		`{"type":"end_of_execution"}` + "\n"
	if got := rec.Body.String(); got != want {
		t.Fatalf("body:\n%s\nwant:\n%s", got, want)
	}
}
