package testserver

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
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

// Conn returns Go SDK connection options for the server: its address as the
// API and sandbox URL, its key, and a two-minute request timeout.
func (s *Server) Conn() sdk.ConnectionOptions {
	u := "http://" + s.Addr
	return sdk.ConnectionOptions{APIKey: s.Key, APIURL: u, SandboxURL: u, RequestTimeout: 2 * time.Minute}
}
