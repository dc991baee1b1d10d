package ocicli

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/runtimetest"
)

func TestMessages(t *testing.T) {
	for _, c := range []struct{ log, want string }{
		{"", "no message"},
		{`{"level":"info","msg":"x"}`, "no message"},
		{"{\"level\":\"error\",\"msg\":\"a\"}\n  plain text  \n{\"level\":\"fatal\",\"msg\":\"b\"}\n", "a; plain text; b"},
	} {
		if got := Messages([]byte(c.log)); got != c.want {
			t.Errorf("Messages(%q) = %q, want %q", c.log, got, c.want)
		}
	}
}

func TestCheckID(t *testing.T) {
	c := &CLI{Name: "x"}
	for _, id := range []string{"cubby-t1a2b", "a.b+c_d", "_x"} {
		if err := c.CheckID(id); err != nil {
			t.Errorf("CheckID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", "-bad", ".x", "a/b", "a b"} {
		if err := c.CheckID(id); err == nil || !strings.HasPrefix(err.Error(), "x: ") {
			t.Errorf("CheckID(%q) = %v, want an error", id, err)
		}
	}
}

// runc returns a CLI for the pinned runc binary (bin/runc) on an empty state
// root (which exists: runc 1.2 and later fail to list a missing one).
func runc(t *testing.T) *CLI {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	root := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	return &CLI{Name: "runc", Binary: runtimetest.Tool(t, "runc", "CUBBY_RUNC"), Flags: []string{"--root", root},
		RunFlags: []string{"--log-format", "json"}, NotFound: "does not exist"}
}

func TestStateListUnknown(t *testing.T) {
	c := runc(t)
	ctx := context.Background()
	_, err := c.State(ctx, "cubby-none")
	if !errors.Is(err, runtime.ErrNotFound) || !strings.HasPrefix(err.Error(), "runc state cubby-none: ") {
		t.Errorf("State of unknown: %v", err)
	}
	if _, found, err := c.Lookup(ctx, "cubby-none"); found || err != nil {
		t.Errorf("Lookup of unknown: %v %v", found, err)
	}
	if err := c.OnContainer(ctx, "pause", "cubby-none"); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("pause of unknown: %v", err)
	}
	if list, err := c.List(ctx); err != nil || len(list) != 0 {
		t.Errorf("List = %+v, %v", list, err)
	}
}

func TestLaunchCarriesLogMessage(t *testing.T) {
	c := runc(t)
	out, err := os.Create(filepath.Join(t.TempDir(), "out.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	err = c.Launch(context.Background(), "cubby-x", out, "create", "--bundle", "/no/such/bundle", "cubby-x")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.HasPrefix(err.Error(), "runc create cubby-x: ") ||
		strings.Contains(err.Error(), "no message") {
		t.Errorf("Launch with a missing bundle: %v", err)
	}
}

func TestWaitPidfd(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fd, err := OpenPidfd(cmd.Process.Pid)
	if err != nil || fd < 0 {
		t.Fatalf("OpenPidfd: %d %v", fd, err)
	}
	defer unix.Close(fd)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := WaitPidfd(ctx, fd); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitPidfd of a running process: %v", err)
	}
	cmd.Process.Kill()
	if err := WaitPidfd(context.Background(), fd); err != nil {
		t.Errorf("WaitPidfd after kill: %v", err)
	}
	cmd.Wait()
	if fd, err := OpenPidfd(cmd.Process.Pid); fd != -1 || err != nil {
		t.Errorf("OpenPidfd of a reaped process: %d %v", fd, err)
	}
	if fd, err := OpenPidfd(0); fd != -1 || err != nil {
		t.Errorf("OpenPidfd(0): %d %v", fd, err)
	}
}
