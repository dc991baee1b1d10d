package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/interpreter"
)

// TestToolLoop runs the agent loop in the SDK's debug mode against Cubby's
// code-interpreter service on a loopback listener (the host's ipykernel), so
// it needs neither a sandbox server nor an LLM API.
func TestToolLoop(t *testing.T) {
	if out, err := exec.Command("/usr/bin/python3", "-c", "import ipykernel").CombinedOutput(); err != nil {
		t.Skipf("needs python3-ipykernel on the host: %v %s", err, out)
	}
	svc, err := interpreter.New(interpreter.Config{
		Log:              slog.New(slog.NewTextHandler(io.Discard, nil)),
		DefaultLanguages: []string{},
		Workdir:          t.TempDir(),
		RuntimeDir:       t.TempDir(),
		PythonExtension:  "-",
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc.Handler())
	defer func() { srv.Close(); svc.Close() }()
	t.Setenv("E2B_DEBUG", "true")
	t.Setenv("E2B_SANDBOX_URL", srv.URL)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	answer, err := run(ctx, "code-interpreter", &scriptedModel{}, "sum of squares?")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(answer, "result: 338350") || !strings.Contains(answer, "result: False") {
		t.Fatalf("answer %q", answer)
	}
}

func TestRenderExecutionError(t *testing.T) {
	if got := callTool(context.Background(), nil, nil, ToolCall{Name: "rm_rf"}); !strings.Contains(got, "unknown tool") {
		t.Fatalf("unknown tool: %q", got)
	}
	if got := callTool(context.Background(), nil, nil, ToolCall{Name: "execute_python", Arguments: []byte(`{}`)}); !strings.Contains(got, "arguments") {
		t.Fatalf("bad arguments: %q", got)
	}
}
