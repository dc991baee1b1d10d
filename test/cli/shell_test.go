package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// screen collects everything written to a terminal's master side.
type screen struct {
	mu   sync.Mutex
	buf  strings.Builder
	more chan struct{} // signalled (non-blocking) on every read
	done chan struct{} // closed when the terminal is closed
}

func newScreen(r io.Reader) *screen {
	sc := &screen{more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(sc.done)
		b := make([]byte, 4096)
		for {
			n, err := r.Read(b)
			sc.mu.Lock()
			sc.buf.Write(b[:n])
			sc.mu.Unlock()
			select {
			case sc.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return sc
}

func (sc *screen) String() string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.buf.String()
}

// waitFor waits until re matches the screen or d passes.
func (sc *screen) waitFor(re *regexp.Regexp, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		if re.MatchString(sc.String()) {
			return true
		}
		select {
		case <-sc.more:
		case <-sc.done:
			return re.MatchString(sc.String())
		case <-deadline.C:
			return false
		}
	}
}

func regexpMust(s string) *regexp.Regexp { return regexp.MustCompile(s) }

// startOnPty starts the CLI with a terminal of the given size as its
// stdin, stdout and stderr.
func startOnPty(t *testing.T, s *server, size *pty.Winsize, args ...string) (*exec.Cmd, *os.File, *screen) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, s.Bin, args...)
	cmd.Env = append(s.env(nil), "TERM=xterm")
	ptmx, err := pty.StartWithSize(cmd, size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ptmx.Close() })
	return cmd, ptmx, newScreen(ptmx)
}

// exitCode waits for cmd and returns its exit status.
func exitCode(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	err := cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// TestShell drives `cubby shell` through a pseudo-terminal: typed commands
// run in the sandbox, the terminal size is passed on and follows a resize
// (SIGWINCH), and cubby exits with the shell's status.
func TestShell(t *testing.T) {
	s := need(t)
	id := s.newSandbox(t).SandboxID
	cmd, ptmx, sc := startOnPty(t, s, &pty.Winsize{Rows: 30, Cols: 100}, "shell", id)

	type_ := func(line string) {
		t.Helper()
		if _, err := ptmx.WriteString(line + "\r"); err != nil {
			t.Fatalf("type %q: %v", line, err)
		}
	}
	type_("echo hi-$((40+2)); tput cols; tput lines")
	if !sc.waitFor(regexpMust(`hi-42\r\n100\r\n30\r\n`), time.Minute) {
		t.Fatalf("no output of `echo hi; tput cols; tput lines` on the screen:\n%q", sc.String())
	}

	// Resize the local terminal: cubby gets SIGWINCH and resizes the remote
	// PTY. The resize races with the typed line, so ask until it shows.
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 123}); err != nil {
		t.Fatal(err)
	}
	resized := regexpMust(`123x40\r\n`)
	deadline := time.Now().Add(time.Minute)
	for !resized.MatchString(sc.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("the remote terminal did not follow the resize:\n%q", sc.String())
		}
		type_(`echo "$(tput cols)x$(tput lines)"`)
		sc.waitFor(resized, 2*time.Second)
	}

	type_("exit 7")
	if code := exitCode(t, cmd); code != 7 {
		t.Errorf("cubby shell exit status %d, want the shell's 7\n%q", code, sc.String())
	}
}

// TestSandboxConnect checks `cubby sandbox connect` is the same shell.
func TestSandboxConnect(t *testing.T) {
	s := need(t)
	id := s.newSandbox(t).SandboxID
	cmd, ptmx, sc := startOnPty(t, s, &pty.Winsize{Rows: 24, Cols: 80}, "sandbox", "connect", id)
	if _, err := ptmx.WriteString("echo connected-$((6*7)) > /tmp/c; cat /tmp/c; exit\r"); err != nil {
		t.Fatal(err)
	}
	if code := exitCode(t, cmd); code != 0 {
		t.Errorf("connect exit status %d\n%q", code, sc.String())
	}
	if !sc.waitFor(regexpMust(`connected-42\r\n`), 10*time.Second) {
		t.Errorf("no command output on the screen:\n%q", sc.String())
	}
}
