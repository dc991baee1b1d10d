package mcptest

import (
	"os"
	"os/exec"
	"testing"
)

// TestPythonClient runs test/mcp/python/check.py: the official MCP Python
// SDK lists and calls the tools over stdio and streamable HTTP, as the MCP
// Inspector does (its venv is made on first use from requirements.txt).
func TestPythonClient(t *testing.T) {
	cmd := exec.Command("python/run.sh")
	cmd.Env = append(os.Environ(), "CUBBY_URL=http://"+srv.Addr, "CUBBY_API_KEY="+srv.Key, "CUBBY_BIN="+srv.Bin)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("python/run.sh: %v", err)
	}
}
