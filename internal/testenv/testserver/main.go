package testserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Main runs a test package against one server started with opts: it stores
// the server in *srv, runs the tests, prints the server's log tail when they
// failed, stops the server and returns the exit code for os.Exit. When
// SkipReason says a server cannot start here it runs nothing and returns 0.
// Use it as
//
//	func TestMain(m *testing.M) { os.Exit(testserver.Main(m, opts, &srv)) }
func Main(m *testing.M, opts Options, srv **Server) int {
	if reason := SkipReason(); reason != "" {
		fmt.Println("skipping:", reason)
		return 0
	}
	s, err := Launch(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*srv = s
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "cubby serve log (tail):\n%s\n", s.Log())
	}
	s.Stop()
	return code
}

// TeamKey creates an API key of team ("" = the default team) with the real
// `cubby keys create` in the server's data directory (the server reads keys
// on every request, so no restart) and returns it. It fails t when the
// command fails or prints something else than the key of that team.
func (s *Server) TeamKey(t testing.TB, team string) string {
	t.Helper()
	args := []string{"keys", "create", "--name", "test", "--json", "--data-dir", s.DataDir}
	if team != "" {
		args = append(args, "--team", team)
	}
	out, err := exec.Command(s.Bin, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("cubby keys create --team %s: %v\n%s", team, err, ee.Stderr)
		}
		t.Fatalf("cubby keys create --team %s: %v", team, err)
	}
	var k struct {
		Key  string `json:"key"`
		Team string `json:"team"`
	}
	if err := json.Unmarshal(out, &k); err != nil || k.Key == "" || (team != "" && k.Team != team) {
		t.Fatalf("cubby keys create --team %s printed %s (%v)", team, out, err)
	}
	return k.Key
}
