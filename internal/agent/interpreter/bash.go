package interpreter

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

// bashEngine is the native bash context: one persistent interactive bash
// (no tty, no line editing, no job control, no history) fed through a pipe, so
// variables, functions and the cwd survive between cells. A cell is sent as
//
//	\builtin trap - INT; \builtin eval $'<code>' </dev/null
//	__cubby_rc=$?; \builtin trap '' INT; \builtin printf %s MARK; ... >&2; ... 'MARK %d\n' ... >&3
//
// with a random MARK per cell: the markers on stdout and stderr delimit the
// cell's output, fd 3 carries the exit status. Interactive mode makes SIGINT
// (sent to the shell's process group) abort the running line but keep the shell;
// stdin is /dev/null so `read` gets EOF instead of eating the protocol.
type bashEngine struct {
	bin      string
	dir      string
	env      []string
	cred     *syscall.Credential
	grace    time.Duration
	log      *slog.Logger
	spawnEnv map[string]string

	mu     sync.Mutex // guards sh and closed against restart/close
	sh     *bashShell
	closed bool

	count int // user cells run on sh (guarded by mu)

	// Owned by the caller holding the context lock:
	applied  map[string]string
	appShell *bashShell
	saved    []string
}

// bashShell is one bash process.
type bashShell struct {
	pid   int
	stdin *os.File
	dead  chan struct{}

	mu     sync.Mutex
	reason error
	sink   *bashSink
}

type bashChunk struct {
	fd   int // 1 stdout, 2 stderr, 3 status
	data []byte
}

// bashSink collects the chunks of the cell in flight; readers never block on it.
type bashSink struct {
	mu     sync.Mutex
	chunks []bashChunk
	notify chan struct{}
}

func (s *bashSink) push(c bashChunk) {
	s.mu.Lock()
	s.chunks = append(s.chunks, c)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *bashSink) drain() []bashChunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.chunks
	s.chunks = nil
	return out
}

// startBash launches the shell and waits for its set-up cell.
func (e *bashEngine) startShell(ctx context.Context) (*bashShell, error) {
	sh, err := spawnBash(e.bin, e.dir, e.env, e.cred)
	if err != nil {
		return nil, err
	}
	setup := "PS1=; PS2=; PS4=; unset PROMPT_COMMAND; set +o history +H +m"
	if _, err := sh.run(ctx, setup, nil, e.grace); err != nil {
		sh.kill(errEngineClosed)
		return nil, fmt.Errorf("bash set-up: %w", err)
	}
	return sh, nil
}

func spawnBash(bin, dir string, env []string, cred *syscall.Credential) (*bashShell, error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err1 := pipe()
	outR, outW, err2 := pipe()
	errR, errW, err3 := pipe()
	ctlR, ctlW, err4 := pipe()
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		closeAll()
		return nil, fmt.Errorf("bash pipes: %w", err)
	}
	cmd := exec.Command(bin, "--noprofile", "--norc", "--noediting", "-i")
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.ExtraFiles = []*os.File{ctlW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, fmt.Errorf("start bash: %w", err)
	}
	inR.Close()
	outW.Close()
	errW.Close()
	ctlW.Close()
	sh := &bashShell{pid: cmd.Process.Pid, stdin: inW, dead: make(chan struct{})}
	for fd, r := range map[int]*os.File{1: outR, 2: errR, 3: ctlR} {
		go sh.read(fd, r)
	}
	go func() {
		err := cmd.Wait()
		sh.mu.Lock()
		if sh.reason == nil {
			sh.reason = fmt.Errorf("%w: bash exited (%v)", errEngineDied, err)
		}
		sh.mu.Unlock()
		syscall.Kill(-sh.pid, syscall.SIGKILL)
		inW.Close()
		close(sh.dead)
	}()
	return sh, nil
}

// read forwards one pipe to the current sink (dropped between cells).
func (sh *bashShell) read(fd int, r *os.File) {
	defer r.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			sh.mu.Lock()
			sink := sh.sink
			sh.mu.Unlock()
			if sink != nil {
				sink.push(bashChunk{fd: fd, data: bytes.Clone(buf[:n])})
			}
		}
		if err != nil {
			if fd == 3 && err == io.EOF {
				// Status channel gone (bash exited or the user closed fd 3): unusable.
				sh.kill(fmt.Errorf("%w: bash status channel closed", errEngineDied))
			}
			return
		}
	}
}

func (sh *bashShell) kill(reason error) {
	sh.mu.Lock()
	if sh.reason == nil {
		sh.reason = reason
	}
	sh.mu.Unlock()
	syscall.Kill(-sh.pid, syscall.SIGKILL)
}

func (sh *bashShell) err() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.reason
}

func (sh *bashShell) alive() bool {
	select {
	case <-sh.dead:
		return false
	default:
		return sh.err() == nil
	}
}

// ansiQuote renders s as a bash $'...' word: backslash and quote escaped,
// control bytes as \xHH, NUL bytes dropped (bash strings cannot hold them).
func ansiQuote(s string) string {
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == 0:
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

func newMark() string {
	var b [12]byte
	rand.Read(b[:])
	return "__cubby_" + hex.EncodeToString(b[:]) + "__"
}

// run executes one cell and returns its exit status. onOut receives output
// (fd 1 or 2; nil discards). When ctx ends the process group gets SIGINT; if
// the cell does not end within grace the shell is killed.
func (sh *bashShell) run(ctx context.Context, code string, onOut func(fd int, text string), grace time.Duration) (int, error) {
	mark := newMark()
	sink := &bashSink{notify: make(chan struct{}, 1)}
	sh.mu.Lock()
	sh.sink = sink
	sh.mu.Unlock()
	defer func() {
		sh.mu.Lock()
		sh.sink = nil
		sh.mu.Unlock()
	}()
	// `\builtin` defeats user aliases and functions named like the builtins.
	script := "\\builtin trap - INT; \\builtin eval " + ansiQuote(code) + " </dev/null\n" +
		"__cubby_rc=$?; \\builtin trap '' INT; \\builtin printf %s " + mark + "; \\builtin printf %s " +
		mark + " >&2; \\builtin printf '" + mark + " %d\\n' \"$__cubby_rc\" >&3; \\builtin unset __cubby_rc\n"
	if _, err := io.WriteString(sh.stdin, script); err != nil {
		if e := sh.err(); e != nil {
			return 0, e
		}
		return 0, fmt.Errorf("%w: write to bash: %v", errEngineDied, err)
	}
	c := &cellParser{mark: mark, onOut: onOut}
	return c.wait(ctx, sh, sink, grace)
}

// cellParser splits the shell's output at the cell's markers.
type cellParser struct {
	mark       string
	onOut      func(fd int, text string)
	pend       [3][]byte // held-back bytes per fd (index fd-1)
	outDone    bool
	errDone    bool
	status     int
	statusDone bool
	cancelErr  error
}

var statusRe = regexp.MustCompile(`(__cubby_[0-9a-f]+__) (-?\d+)\n`)

func (c *cellParser) feed(ch bashChunk) {
	i := ch.fd - 1
	c.pend[i] = append(c.pend[i], ch.data...)
	if ch.fd == 3 {
		for _, m := range statusRe.FindAllSubmatch(c.pend[i], -1) {
			if string(m[1]) == c.mark {
				c.status, _ = strconv.Atoi(string(m[2]))
				c.statusDone = true
			}
		}
		return
	}
	done := &c.outDone
	if ch.fd == 2 {
		done = &c.errDone
	}
	if *done {
		return // after the marker: output of background jobs, dropped
	}
	buf := c.pend[i]
	if k := bytes.Index(buf, []byte(c.mark)); k >= 0 {
		c.emit(ch.fd, buf[:k])
		c.pend[i], *done = nil, true
		return
	}
	// Hold back a possible marker prefix and an incomplete UTF-8 sequence.
	keep := 0
	for n := min(len(c.mark)-1, len(buf)); n > 0; n-- {
		if bytes.HasSuffix(buf, []byte(c.mark[:n])) {
			keep = n
			break
		}
	}
	cut := len(buf) - keep
	for j := cut - 1; j >= 0 && j >= cut-utf8.UTFMax; j-- {
		if utf8.RuneStart(buf[j]) {
			if !utf8.FullRune(buf[j:cut]) {
				cut = j
			}
			break
		}
	}
	c.emit(ch.fd, buf[:cut])
	c.pend[i] = append([]byte(nil), buf[cut:]...)
}

func (c *cellParser) emit(fd int, b []byte) {
	if len(b) > 0 && c.onOut != nil {
		c.onOut(fd, string(b))
	}
}

func (c *cellParser) wait(ctx context.Context, sh *bashShell, sink *bashSink, grace time.Duration) (int, error) {
	ctxDone := ctx.Done()
	var graceC <-chan time.Time
	for {
		for _, ch := range sink.drain() {
			c.feed(ch)
		}
		if c.outDone && c.errDone && c.statusDone {
			return c.status, c.cancelErr
		}
		select {
		case <-sink.notify:
		case <-ctxDone:
			ctxDone, c.cancelErr = nil, ctx.Err()
			syscall.Kill(-sh.pid, syscall.SIGINT)
			t := time.NewTimer(grace)
			defer t.Stop()
			graceC = t.C
		case <-graceC:
			sh.kill(fmt.Errorf("%w: bash did not respond to interrupt; killed", errEngineDied))
			<-sh.dead
			return c.status, fmt.Errorf("%w: %w", sh.err(), c.cancelErr)
		case <-sh.dead:
			for _, ch := range sink.drain() {
				c.feed(ch)
			}
			return c.status, sh.err()
		}
	}
}

// shell returns a live shell, starting one if needed; ctx bounds the start.
func (e *bashEngine) shell(ctx context.Context) (*bashShell, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errEngineClosed
	}
	if e.sh != nil && e.sh.alive() {
		return e.sh, nil
	}
	if e.sh != nil {
		e.sh.kill(errEngineRestarted)
	}
	sh, err := e.startShell(ctx)
	if err != nil {
		return nil, err
	}
	e.sh, e.count = sh, 0
	return sh, nil
}

func (e *bashEngine) execute(ctx context.Context, code string, out *stream) error {
	sh, err := e.shell(ctx)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.count++
	n := e.count
	e.mu.Unlock()
	out.executions(n)
	onOut := func(fd int, text string) {
		if fd == 2 {
			out.output(execapi.TypeStderr, text, "")
		} else {
			out.output(execapi.TypeStdout, text, "")
		}
	}
	rc, err := sh.run(ctx, code, onOut, e.grace)
	if err != nil {
		return err
	}
	if rc != 0 {
		out.kernelError(ErrNameExit, "exit status "+strconv.Itoa(rc), nil)
	}
	return nil
}

// silent runs service code, discarding output; a non-zero status is an error.
func (e *bashEngine) silent(ctx context.Context, code string) error {
	sh, err := e.shell(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, silentTimeout)
	defer cancel()
	rc, err := sh.run(ctx, code, nil, e.grace)
	if err == nil && rc != 0 {
		err = fmt.Errorf("bash exit status %d", rc)
	}
	return err
}

var bashName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (e *bashEngine) syncEnv(ctx context.Context, env map[string]string) error {
	sh, err := e.shell(ctx)
	if err != nil {
		return err
	}
	if sh != e.appShell {
		e.appShell, e.applied = sh, maps.Clone(e.spawnEnv)
	}
	var b strings.Builder
	diff := map[string]string{}
	for _, k := range sortedKeys(env) {
		if cur, ok := e.applied[k]; (!ok || cur != env[k]) && bashName.MatchString(k) {
			diff[k] = env[k]
			fmt.Fprintf(&b, "export %s=%s\n", k, ansiQuote(env[k]))
		}
	}
	if len(diff) == 0 {
		return nil
	}
	if err := e.silent(ctx, b.String()); err != nil {
		return fmt.Errorf("set sandbox env: %w", err)
	}
	maps.Copy(e.applied, diff)
	return nil
}

func (e *bashEngine) pushEnv(ctx context.Context, vars map[string]string) error {
	var b strings.Builder
	e.saved = e.saved[:0]
	for _, k := range sortedKeys(vars) {
		if !bashName.MatchString(k) {
			return fmt.Errorf("env var name %q is not a valid bash identifier", k)
		}
		fmt.Fprintf(&b, "if [ -n \"${%[1]s+x}\" ]; then __cubby_old_%[1]s=\"$%[1]s\"; else unset __cubby_old_%[1]s; fi; export %[1]s=%[2]s\n",
			k, ansiQuote(vars[k]))
		e.saved = append(e.saved, k)
	}
	if err := e.silent(ctx, b.String()); err != nil {
		return fmt.Errorf("set env_vars: %w", err)
	}
	return nil
}

func (e *bashEngine) popEnv(ctx context.Context) error {
	var b strings.Builder
	for _, k := range e.saved {
		fmt.Fprintf(&b, "if [ -n \"${__cubby_old_%[1]s+x}\" ]; then export %[1]s=\"$__cubby_old_%[1]s\"; else unset %[1]s; fi; unset __cubby_old_%[1]s\n", k)
	}
	e.saved = e.saved[:0]
	if b.Len() == 0 {
		return nil
	}
	if err := e.silent(ctx, b.String()); err != nil {
		return fmt.Errorf("restore env_vars: %w", err)
	}
	return nil
}

func (e *bashEngine) restart(ctx context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errEngineClosed
	}
	old := e.sh
	e.mu.Unlock()
	if old != nil {
		old.kill(errEngineRestarted)
		<-old.dead
	}
	_, err := e.shell(ctx)
	return err
}

func (e *bashEngine) close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.sh != nil {
		e.sh.kill(errEngineClosed)
	}
	return nil
}
