package interpreter

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/agent"
	"github.com/cubby-dev/cubby/internal/agentapi"
)

// TestSandboxEnvFromEnvd reads the sandbox env from the real envd handler's
// GET /envs, forwarding the request's X-Access-Token.
func TestSandboxEnvFromEnvd(t *testing.T) {
	a := agent.New(agent.Config{})
	a.Settings().Apply(agentapi.InitRequest{EnvVars: map[string]string{"FROM_ENVD": "yes"}, AccessToken: "tok"})
	envd := httptest.NewServer(a.Handler())
	defer envd.Close()
	_, base := newService(t, func(c *Config) {
		c.EnvdURL = envd.URL
		c.DefaultLanguages = []string{}
	})
	run := func(token string) string {
		b, _ := json.Marshal(map[string]any{"language": "bash", "code": "echo ${FROM_ENVD-none}"})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/execute", bytes.NewReader(b))
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return parseStream(t, resp.Body, nil).stdout
	}
	if got := run("tok"); got != "yes\n" {
		t.Fatalf("with token: %q", got)
	}
}
