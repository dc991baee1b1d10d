package cli

import (
	"strings"
	"testing"
)

// TestExec checks streaming, exit status propagation, quoting, options,
// stdin and --json of `cubby exec`.
func TestExec(t *testing.T) {
	s := need(t)
	id := s.newSandbox(t).SandboxID

	r := s.cli(t, runOpts{}, "exec", id, "--", "echo out; echo err >&2; exit 3")
	if r.code != 3 || r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("exit 3: %s", r)
	}
	if r = s.cli(t, runOpts{}, "exec", id, "--", "true"); r.code != 0 || r.stdout != "" {
		t.Errorf("true: %s", r)
	}
	if r = s.cli(t, runOpts{}, "exec", id, "--", "kill -9 $$"); r.code != 137 {
		t.Errorf("killed by SIGKILL: %s", r)
	}
	// Several arguments are words, quoted for the shell.
	if out := s.ok(t, "exec", id, "--", "printf", "[%s]\n", "a b", "c'd", "$HOME"); out != "[a b]\n[c'd]\n[$HOME]\n" {
		t.Errorf("quoted words: %q", out)
	}
	if out := s.ok(t, "exec", id, "--cwd", "/tmp", "--", "pwd"); out != "/tmp\n" {
		t.Errorf("--cwd: %q", out)
	}
	if out := s.ok(t, "exec", id, "--user", "root", "--", "whoami"); out != "root\n" {
		t.Errorf("--user root: %q", out)
	}
	if out := s.ok(t, "exec", id, "-e", "A=1", "--env", "B=two words", "--", `echo "$A/$B"`); out != "1/two words\n" {
		t.Errorf("--env: %q", out)
	}
	r = s.cli(t, runOpts{stdin: "hello\nworld\n"}, "exec", "-i", id, "--", "wc -l; cat")
	if r.code != 0 || r.stdout != "2\n" {
		// wc consumes all of stdin; cat then sees EOF at once.
		t.Errorf("-i: %s", r)
	}
	r = s.cli(t, runOpts{}, "exec", id, "--json", "--", "echo hi; echo oops >&2; exit 2")
	if r.code != 2 {
		t.Errorf("--json exit status: %s", r)
	}
	got := decode[struct {
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
		Stderr   string `json:"stderr"`
	}](t, r.stdout)
	if got.ExitCode != 2 || got.Stdout != "hi\n" || got.Stderr != "oops\n" {
		t.Errorf("--json: %+v", got)
	}
	r = s.cli(t, runOpts{}, "exec", id, "--cwd", "/no/such/dir", "--", "true")
	if r.code != 1 || r.stderr == "" {
		t.Errorf("missing --cwd: %s", r)
	}
	r = s.cli(t, runOpts{}, "exec", id, "echo")
	if r.code != 1 || !strings.Contains(r.stderr, "usage: cubby exec") {
		t.Errorf("without --: %s", r)
	}
	r = s.cli(t, runOpts{}, "exec", "nosuchsandbox0000000", "--", "true")
	if r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("unknown sandbox: %s", r)
	}
}
