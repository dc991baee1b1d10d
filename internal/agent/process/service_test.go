package process

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/cubby-dev/cubby/internal/agent/settings"
	"github.com/cubby-dev/cubby/internal/agentapi"
	pb "github.com/cubby-dev/cubby/internal/envdpb/process"
	"github.com/cubby-dev/cubby/internal/envdpb/process/processconnect"
)

// harness serves a Service over a real HTTP server and talks to it with real
// connect clients: JSON (what the E2B SDKs use) and binary protobuf.
type harness struct {
	svc     *Service
	json    processconnect.ProcessClient
	bin     processconnect.ProcessClient
	workdir string
	url     string
}

func newHarness(t *testing.T, envVars map[string]string) *harness {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to run commands as other users")
	}
	st := settings.New()
	wd := t.TempDir()
	st.Apply(agentapi.InitRequest{DefaultUser: "root", DefaultWorkdir: wd, EnvVars: envVars})
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc := NewService(st, log)
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(svc))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		svc.Close()
		srv.Close()
	})
	noGzip := connect.WithAcceptCompression("gzip", nil, nil) // like the SDKs (docs/wire/envd.md)
	return &harness{
		svc:     svc,
		json:    processconnect.NewProcessClient(srv.Client(), srv.URL, connect.WithProtoJSON(), noGzip),
		bin:     processconnect.NewProcessClient(srv.Client(), srv.URL, noGzip),
		workdir: wd,
		url:     srv.URL,
	}
}

// bash builds a Start request like the SDK's commands.run, without -l so the
// host's profile cannot rewrite the environment under test.
func bash(script string, stdin bool) *connect.Request[pb.StartRequest] {
	return connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-c", script}},
		Stdin:   proto.Bool(stdin),
	})
}

func pidSel(pid uint32) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
}

func tagSel(tag string) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}
}

// result accumulates what a process stream delivered.
type result struct {
	pid                 uint32
	stdout, stderr, pty bytes.Buffer
	maxChunk            int
	keepalives          int
	end                 *pb.ProcessEvent_EndEvent
}

// events reads a Start or Connect stream and checks its shape as it goes:
// start first, data/keepalives, one end, nothing after.
type events struct {
	t       *testing.T
	receive func() bool
	msg     func() *pb.ProcessEvent
	err     func() error
	res     result
	started bool
}

func startEvents(t *testing.T, s *connect.ServerStreamForClient[pb.StartResponse]) *events {
	return &events{t: t, receive: s.Receive, msg: func() *pb.ProcessEvent { return s.Msg().GetEvent() }, err: s.Err}
}

func connectEvents(t *testing.T, s *connect.ServerStreamForClient[pb.ConnectResponse]) *events {
	return &events{t: t, receive: s.Receive, msg: func() *pb.ProcessEvent { return s.Msg().GetEvent() }, err: s.Err}
}

// next receives one event; false when the stream ended (err() tells how).
func (e *events) next() bool {
	e.t.Helper()
	if !e.receive() {
		return false
	}
	ev := e.msg()
	if e.res.end != nil {
		e.t.Fatalf("event after end: %v", ev)
	}
	if !e.started {
		if ev.GetStart() == nil {
			e.t.Fatalf("first event is not start: %v", ev)
		}
		e.started, e.res.pid = true, ev.GetStart().GetPid()
		return true
	}
	switch {
	case ev.GetData() != nil:
		d := ev.GetData()
		e.res.stdout.Write(d.GetStdout())
		e.res.stderr.Write(d.GetStderr())
		e.res.pty.Write(d.GetPty())
		e.res.maxChunk = max(e.res.maxChunk, len(d.GetStdout()), len(d.GetStderr()), len(d.GetPty()))
	case ev.GetKeepalive() != nil:
		e.res.keepalives++
	case ev.GetEnd() != nil:
		e.res.end = ev.GetEnd()
	default:
		e.t.Fatalf("unexpected event %v", ev)
	}
	return true
}

// until receives until cond holds; the stream ending first is fatal.
func (e *events) until(what string, cond func(*result) bool) {
	e.t.Helper()
	for !cond(&e.res) {
		if !e.next() {
			e.t.Fatalf("stream ended before %s (err %v); stdout %q pty %q", what, e.err(), e.res.stdout.String(), e.res.pty.String())
		}
	}
}

// finish receives the rest of the stream and requires a clean end with an end event.
func (e *events) finish() *result {
	e.t.Helper()
	for e.next() {
	}
	if err := e.err(); err != nil {
		e.t.Fatalf("stream error: %v", err)
	}
	if e.res.end == nil {
		e.t.Fatal("stream ended without an end event")
	}
	return &e.res
}

func run(t *testing.T, c processconnect.ProcessClient, req *connect.Request[pb.StartRequest]) *result {
	t.Helper()
	s, err := c.Start(t.Context(), req)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer s.Close()
	return startEvents(t, s).finish()
}

func startStream(t *testing.T, ctx context.Context, c processconnect.ProcessClient, req *connect.Request[pb.StartRequest]) *events {
	t.Helper()
	s, err := c.Start(ctx, req)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e := startEvents(t, s)
	e.until("start", func(r *result) bool { return r.pid != 0 })
	return e
}

func connectStream(t *testing.T, c processconnect.ProcessClient, sel *pb.ProcessSelector) *events {
	t.Helper()
	s, err := c.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e := connectEvents(t, s)
	e.until("start", func(r *result) bool { return r.pid != 0 })
	return e
}

// startErr runs a Start expected to fail and returns its error.
func startErr(t *testing.T, c processconnect.ProcessClient, req *connect.Request[pb.StartRequest]) error {
	t.Helper()
	s, err := c.Start(t.Context(), req)
	if err != nil {
		return err
	}
	defer s.Close()
	if s.Receive() {
		t.Fatalf("want an error, got event %v", s.Msg())
	}
	return s.Err()
}

func wantCode(t *testing.T, err error, code connect.Code, msg string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("want code %v, got %v", code, err)
	}
	var ce *connect.Error
	if msg != "" && (!errors.As(err, &ce) || ce.Message() != msg) {
		t.Fatalf("want message %q, got %v", msg, err)
	}
}

func wantEnd(t *testing.T, r *result, code int32, exited bool, status string) {
	t.Helper()
	e := r.end
	if e.GetExitCode() != code || e.GetExited() != exited || e.GetStatus() != status {
		t.Fatalf("end = %v, want exitCode %d exited %v status %q", e, code, exited, status)
	}
	if (code != 0 || !exited) && e.GetError() != status {
		t.Fatalf("end error = %q, want %q", e.GetError(), status)
	}
	if code == 0 && exited && e.Error != nil {
		t.Fatalf("clean exit carries error %q", e.GetError())
	}
}

func basicAuth(req interface{ Header() http.Header }, user string) {
	req.Header().Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":")))
}

func TestEchoStderrAndExitCodes(t *testing.T) {
	h := newHarness(t, nil)
	for name, c := range map[string]processconnect.ProcessClient{"json": h.json, "binary": h.bin} {
		t.Run(name, func(t *testing.T) {
			r := run(t, c, bash("echo hello; echo oops >&2; exit 3", false))
			if r.stdout.String() != "hello\n" || r.stderr.String() != "oops\n" {
				t.Fatalf("stdout %q stderr %q", r.stdout.String(), r.stderr.String())
			}
			wantEnd(t, r, 3, true, "exit status 3")
			wantEnd(t, run(t, c, bash("true", false)), 0, true, "exit status 0")
		})
	}
}

func TestEnvPrecedenceAndNoLeak(t *testing.T) {
	h := newHarness(t, map[string]string{"FOO": "sandbox", "BAR": "sandbox", "HOME": "/sandbox-home"})
	req := bash(`echo "$FOO $BAR $QUX $HOME $USER $LOGNAME"; echo "$PATH"`, false)
	req.Msg.Process.Envs = map[string]string{"BAR": "req", "QUX": "once"}
	r := run(t, h.json, req)
	lines := strings.Split(r.stdout.String(), "\n")
	if lines[0] != "sandbox req once /sandbox-home root root" {
		t.Fatalf("env line %q", lines[0])
	}
	if !strings.Contains(lines[1], "/usr/local/bin") || !strings.Contains(lines[1], "/usr/local/sbin") {
		t.Fatalf("PATH %q lacks /usr/local dirs", lines[1])
	}
	r = run(t, h.json, bash(`echo "[$BAR][$QUX]"`, false))
	if r.stdout.String() != "[sandbox][]\n" {
		t.Fatalf("request env leaked into the next process: %q", r.stdout.String())
	}
}

func TestCwd(t *testing.T) {
	h := newHarness(t, nil)
	if r := run(t, h.json, bash("pwd", false)); r.stdout.String() != h.workdir+"\n" {
		t.Fatalf("default cwd %q, want workdir %s", r.stdout.String(), h.workdir)
	}
	req := bash("pwd", false)
	req.Msg.Process.Cwd = proto.String("/tmp")
	if r := run(t, h.json, req); r.stdout.String() != "/tmp\n" {
		t.Fatalf("cwd %q, want /tmp", r.stdout.String())
	}
	missing := filepath.Join(h.workdir, "no-such-dir")
	req = bash("pwd", false)
	req.Msg.Process.Cwd = proto.String(missing)
	wantCode(t, startErr(t, h.json, req), connect.CodeInvalidArgument, fmt.Sprintf("cwd '%s' does not exist", missing))
}

func TestUsers(t *testing.T) {
	h := newHarness(t, nil)
	req := bash(`id -u; id -g; echo "$HOME $USER"; pwd`, false)
	basicAuth(req, "nobody")
	r := run(t, h.json, req)
	// The 0700 temp workdir is not enterable by nobody, whose home does not exist.
	if r.stdout.String() != "65534\n65534\n/nonexistent nobody\n/\n" {
		t.Fatalf("as nobody: %q", r.stdout.String())
	}
	req = bash("true", false)
	basicAuth(req, "nosuchusert9q")
	wantCode(t, startErr(t, h.json, req), connect.CodeUnauthenticated, "invalid username: 'nosuchusert9q'")
}

func TestStdin(t *testing.T) {
	h := newHarness(t, nil)
	e := startStream(t, t.Context(), h.json, bash("cat", true))
	sel := pidSel(e.res.pid)
	in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("hello\n")}}
	if _, err := h.json.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in})); err != nil {
		t.Fatalf("send input: %v", err)
	}
	e.until("echoed input", func(r *result) bool { return r.stdout.String() == "hello\n" })
	if _, err := h.json.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	wantEnd(t, e.finish(), 0, true, "exit status 0")

	// An absent stdin field means a pipe too.
	req := bash(`read x; echo "got $x"`, false)
	req.Msg.Stdin = nil
	e = startStream(t, t.Context(), h.bin, req)
	in.Input = &pb.ProcessInput_Stdin{Stdin: []byte("yes\n")}
	if _, err := h.bin.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: pidSel(e.res.pid), Input: in})); err != nil {
		t.Fatalf("send input: %v", err)
	}
	if r := e.finish(); r.stdout.String() != "got yes\n" {
		t.Fatalf("stdout %q", r.stdout.String())
	}

	// stdin:false reads /dev/null.
	r := run(t, h.json, bash("cat; echo done", false))
	if r.stdout.String() != "done\n" {
		t.Fatalf("stdin:false: %q", r.stdout.String())
	}
}

func TestStreamInput(t *testing.T) {
	h := newHarness(t, nil)
	e := startStream(t, t.Context(), h.json, bash("cat", true))
	sel := pidSel(e.res.pid)
	cs := h.json.StreamInput(t.Context())
	msgs := []*pb.StreamInputRequest{
		{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("abc\n")}}}}},
		{Event: &pb.StreamInputRequest_Keepalive{Keepalive: &pb.StreamInputRequest_KeepAlive{}}},
		{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("def\n")}}}}},
	}
	for _, m := range msgs {
		if err := cs.Send(m); err != nil {
			t.Fatalf("stream input send: %v", err)
		}
	}
	if _, err := cs.CloseAndReceive(); err != nil {
		t.Fatalf("stream input: %v", err)
	}
	e.until("streamed input", func(r *result) bool { return r.stdout.String() == "abc\ndef\n" })
	if _, err := h.json.CloseStdin(t.Context(), connect.NewRequest(&pb.CloseStdinRequest{Process: sel})); err != nil {
		t.Fatalf("close stdin: %v", err)
	}
	wantEnd(t, e.finish(), 0, true, "exit status 0")
}

// gone reports whether pid no longer runs (absent, or a zombie nobody reaped).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// eventually polls cond until it holds or the test's deadline is near.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	limit := time.Now().Add(30 * time.Second)
	if d, ok := t.Deadline(); ok && d.Before(limit) {
		limit = d.Add(-time.Second)
	}
	for !cond() {
		if time.Now().After(limit) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSendSignalKillsGroup(t *testing.T) {
	h := newHarness(t, nil)
	e := startStream(t, t.Context(), h.bin, bash("sleep 300 & echo $!; wait", false))
	e.until("child pid", func(r *result) bool { return strings.HasSuffix(r.stdout.String(), "\n") })
	child, err := strconv.Atoi(strings.TrimSpace(e.res.stdout.String()))
	if err != nil {
		t.Fatalf("child pid: %v", err)
	}
	sig := &pb.SendSignalRequest{Process: pidSel(e.res.pid), Signal: pb.Signal_SIGNAL_SIGKILL}
	if _, err := h.bin.SendSignal(t.Context(), connect.NewRequest(sig)); err != nil {
		t.Fatalf("send signal: %v", err)
	}
	wantEnd(t, e.finish(), -1, false, "signal: killed")

	probe := run(t, h.json, bash(fmt.Sprintf("kill -0 %d", e.res.pid), false))
	if probe.end.GetExitCode() == 0 {
		t.Fatalf("kill -0 %d succeeded after SIGKILL", e.res.pid)
	}
	eventually(t, "background child killed with its group", func() bool { return gone(child) })

	sig.Process = pidSel(999999)
	_, err = h.json.SendSignal(t.Context(), connect.NewRequest(sig))
	wantCode(t, err, connect.CodeNotFound, "process with pid 999999 not found")
}

func TestDisconnectKeepsProcess(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	e := startStream(t, ctx, h.json, bash(`read x; echo "got $x"`, true))
	cancel()
	for e.next() { // drain whatever arrives until the stream reports the cancel
	}
	if connect.CodeOf(e.err()) != connect.CodeCanceled {
		t.Fatalf("want canceled stream, got %v", e.err())
	}

	c := connectStream(t, h.json, pidSel(e.res.pid))
	if c.res.pid != e.res.pid {
		t.Fatalf("connect pid %d, want %d", c.res.pid, e.res.pid)
	}
	in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("again\n")}}
	if _, err := h.json.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: pidSel(e.res.pid), Input: in})); err != nil {
		t.Fatalf("send input after disconnect: %v", err)
	}
	r := c.finish()
	if r.stdout.String() != "got again\n" {
		t.Fatalf("stdout %q", r.stdout.String())
	}
	wantEnd(t, r, 0, true, "exit status 0")
}

func TestDeadlineKillsProcess(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	e := startStream(t, ctx, h.json, bash("sleep 30", false))
	for e.next() {
	}
	if connect.CodeOf(e.err()) != connect.CodeDeadlineExceeded {
		t.Fatalf("want deadline_exceeded, got %v", e.err())
	}
	// Connect works for running and recently finished processes alike.
	wantEnd(t, connectStream(t, h.json, pidSel(e.res.pid)).finish(), -1, false, "signal: killed")
}

func TestPTYResize(t *testing.T) {
	h := newHarness(t, nil)
	req := connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{
			Cmd: "/bin/bash", Args: []string{"-c", "tput cols; read x; tput cols"},
			Envs: map[string]string{"TERM": "xterm-256color"},
		},
		Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}},
	})
	e := startStream(t, t.Context(), h.json, req)
	e.until("first width", func(r *result) bool { return strings.Contains(r.pty.String(), "80\r\n") })
	sel := pidSel(e.res.pid)
	up := &pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 123, Rows: 40}}}
	if _, err := h.json.Update(t.Context(), connect.NewRequest(up)); err != nil {
		t.Fatalf("update: %v", err)
	}
	in := &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("\r")}}
	if _, err := h.json.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in})); err != nil {
		t.Fatalf("send pty input: %v", err)
	}
	r := e.finish()
	if !strings.Contains(r.pty.String(), "123\r\n") || r.stdout.Len() != 0 {
		t.Fatalf("pty output %q (stdout %q)", r.pty.String(), r.stdout.String())
	}
	if r.maxChunk > ptyChunk {
		t.Fatalf("pty chunk of %d bytes", r.maxChunk)
	}
	wantEnd(t, r, 0, true, "exit status 0")
}

func TestListAndTags(t *testing.T) {
	h := newHarness(t, nil)
	tags := []string{"ta" + rand.Text()[:6], "tb" + rand.Text()[:6]}
	pids := map[uint32]string{}
	for _, tag := range tags {
		req := bash("sleep 300", false)
		req.Msg.Tag = proto.String(tag)
		pids[startStream(t, t.Context(), h.json, req).res.pid] = tag
	}
	res, err := h.json.List(t.Context(), connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	found := 0
	for _, p := range res.Msg.GetProcesses() {
		if tag, ok := pids[p.GetPid()]; ok {
			found++
			if p.GetTag() != tag || p.GetConfig().GetCmd() != "/bin/bash" || p.GetConfig().GetCwd() != h.workdir {
				t.Fatalf("listed %v, want tag %s cmd /bin/bash cwd %s", p, tag, h.workdir)
			}
		}
	}
	if found != 2 {
		t.Fatalf("list has %d of our 2 processes: %v", found, res.Msg)
	}
	for pid, tag := range pids {
		c := connectStream(t, h.json, tagSel(tag))
		if c.res.pid != pid {
			t.Fatalf("connect by tag %s: pid %d, want %d", tag, c.res.pid, pid)
		}
		sig := &pb.SendSignalRequest{Process: tagSel(tag), Signal: pb.Signal_SIGNAL_SIGTERM}
		if _, err := h.json.SendSignal(t.Context(), connect.NewRequest(sig)); err != nil {
			t.Fatalf("signal by tag: %v", err)
		}
		wantEnd(t, c.finish(), -1, false, "signal: terminated")
	}
}

func TestConnectFinishedAndUnknown(t *testing.T) {
	h := newHarness(t, nil)
	req := bash("echo hi", false)
	req.Msg.Tag = proto.String("tdone")
	r := run(t, h.json, req)
	for _, sel := range []*pb.ProcessSelector{pidSel(r.pid), tagSel("tdone")} {
		c := connectStream(t, h.json, sel).finish()
		if c.pid != r.pid || c.stdout.Len() != 0 {
			t.Fatalf("connect to finished: pid %d stdout %q", c.pid, c.stdout.String())
		}
		wantEnd(t, c, 0, true, "exit status 0")
	}
	s, err := h.json.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: pidSel(999999)}))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer s.Close()
	if s.Receive() {
		t.Fatalf("unknown pid produced %v", s.Msg())
	}
	wantCode(t, s.Err(), connect.CodeNotFound, "process with pid 999999 not found")
	_, err = h.json.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: pidSel(r.pid)}))
	wantCode(t, err, connect.CodeNotFound, "")
}

func TestBigOutputComplete(t *testing.T) {
	h := newHarness(t, nil)
	data := make([]byte, 10<<20)
	_, _ = rand.Read(data)
	file := filepath.Join(h.workdir, "big")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := run(t, h.json, bash("cat "+file, false))
	if !bytes.Equal(r.stdout.Bytes(), data) {
		t.Fatalf("got %d bytes, want %d identical bytes", r.stdout.Len(), len(data))
	}
	if r.maxChunk > pipeChunk {
		t.Fatalf("chunk of %d bytes exceeds %d", r.maxChunk, pipeChunk)
	}
	wantEnd(t, r, 0, true, "exit status 0")
}

func TestFanOutAndKeepalive(t *testing.T) {
	h := newHarness(t, nil)
	req := bash(`read x; echo "out $x"`, true)
	req.Header().Set(KeepaliveHeader, "1")
	start := startStream(t, t.Context(), h.json, req)
	start.until("a keepalive", func(r *result) bool { return r.keepalives > 0 })
	a := connectStream(t, h.json, pidSel(start.res.pid))
	b := connectStream(t, h.bin, pidSel(start.res.pid))
	in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("all\n")}}
	if _, err := h.json.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: pidSel(start.res.pid), Input: in})); err != nil {
		t.Fatalf("send input: %v", err)
	}
	for name, e := range map[string]*events{"start": start, "connect-json": a, "connect-binary": b} {
		r := e.finish()
		if r.stdout.String() != "out all\n" {
			t.Fatalf("%s subscriber got %q", name, r.stdout.String())
		}
		wantEnd(t, r, 0, true, "exit status 0")
	}
}

func TestCloseKillsProcesses(t *testing.T) {
	h := newHarness(t, nil)
	e := startStream(t, t.Context(), h.json, bash("sleep 300", false))
	h.svc.Close()
	wantEnd(t, e.finish(), -1, false, "signal: killed")
	wantCode(t, startErr(t, h.json, bash("true", false)), connect.CodeUnavailable, "")
}

// TestRawJSONWire speaks the Connect streaming protocol by hand with the body
// the JS SDK sends (docs/wire/envd.md) and checks envelopes and JSON field names.
func TestRawJSONWire(t *testing.T) {
	h := newHarness(t, nil)
	body := []byte(`{"process":{"cmd":"/bin/bash","args":["-c","echo hello; exit 2"],"envs":{"X":"1"}},"stdin":false}`)
	env := append([]byte{0, 0, 0, 0, byte(len(body))}, body...)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url+processconnect.ProcessStartProcedure, bytes.NewReader(env))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", "60000")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("status %d content-type %q", res.StatusCode, res.Header.Get("Content-Type"))
	}
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	var flags []byte
	for len(raw) >= 5 {
		n := int(binary.BigEndian.Uint32(raw[1:5]))
		var msg bytes.Buffer // protojson randomises whitespace
		if err := json.Compact(&msg, raw[5:5+n]); err != nil {
			t.Fatalf("envelope %q: %v", raw[5:5+n], err)
		}
		flags, msgs = append(flags, raw[0]), append(msgs, msg.String())
		raw = raw[5+n:]
	}
	if len(msgs) != 4 || !strings.HasPrefix(msgs[0], `{"event":{"start":{"pid":`) ||
		msgs[1] != `{"event":{"data":{"stdout":"aGVsbG8K"}}}` ||
		msgs[2] != `{"event":{"end":{"exitCode":2,"exited":true,"status":"exit status 2","error":"exit status 2"}}}` ||
		flags[3] != 2 || msgs[3] != `{}` {
		t.Fatalf("envelopes %q flags %v", msgs, flags)
	}
}

// TestSlowSubscriberDroppedNotOutput checks the fan-out policy end to end: a
// subscriber that stops reading is detached with data_loss once more than its
// backlog is queued, while the process and a reading subscriber are unaffected.
// The reader paces the output (one MiB per stdin line) so only the stalled
// subscriber can fall behind; 16 MiB exceeds what loopback TCP buffers absorb.
func TestSlowSubscriberDroppedNotOutput(t *testing.T) {
	h := newHarness(t, nil)
	h.svc.backlog = 2 << 20
	const stages, stage = 16, 1 << 20
	script := fmt.Sprintf("for i in $(seq %d); do read x; head -c %d /dev/zero; done", stages, stage)
	fast := startStream(t, t.Context(), h.bin, bash(script, true))
	sel := pidSel(fast.res.pid)
	slow := connectStream(t, h.bin, sel) // attached, then not read until the end
	in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("\n")}}
	for i := range stages {
		if _, err := h.bin.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in})); err != nil {
			t.Fatalf("send input: %v", err)
		}
		fast.until("a stage of output", func(r *result) bool { return r.stdout.Len() == (i+1)*stage })
	}
	r := fast.finish()
	if r.stdout.Len() != stages*stage {
		t.Fatalf("reading subscriber got %d bytes, want %d", r.stdout.Len(), stages*stage)
	}
	wantEnd(t, r, 0, true, "exit status 0")
	for slow.next() {
	}
	wantCode(t, slow.err(), connect.CodeDataLoss, "")
	if slow.res.end != nil || slow.res.stdout.Len() >= stages*stage {
		t.Fatalf("stalled subscriber got %d bytes and end %v", slow.res.stdout.Len(), slow.res.end)
	}
}

func TestBackgroundChildDoesNotHoldEnd(t *testing.T) {
	h := newHarness(t, nil)
	r := run(t, h.json, bash("sleep 300 & echo $!", false))
	child, err := strconv.Atoi(strings.TrimSpace(r.stdout.String()))
	if err != nil {
		t.Fatalf("child pid %q: %v", r.stdout.String(), err)
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	wantEnd(t, r, 0, true, "exit status 0")
	if gone(child) {
		t.Fatal("a background child must outlive its parent's normal exit")
	}
}
