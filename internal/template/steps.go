package template

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/agentclient"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/layer"
)

// step runs one build step.
func (r *run) step(ctx context.Context, n string, st Step) error {
	switch st.Type {
	case StepEnv:
		env := copyEnv(r.st.env)
		for i := 0; i+1 < len(st.Args); i += 2 {
			env[st.Args[i]] = st.Args[i+1]
		}
		r.st.env = env
		return nil
	case StepUser:
		return r.user(ctx, n, st.Args[0], st.Force)
	case StepWorkdir:
		return r.workdir(ctx, n, st.Args[0], st.Force)
	case StepCopy:
		return r.copy(ctx, n, st)
	}
	user := r.st.user
	if len(st.Args) > 1 && st.Args[1] != "" {
		user = st.Args[1]
	}
	key := r.stepKey(StepRun, st.Args[0], user)
	return r.cached(ctx, n, st.describe(), key, st.Force, func(w io.Writer) error {
		return r.runInSandbox(ctx, n, st.Args[0], user, r.st.workdir, w)
	})
}

// user switches the build user, creating the account when the tree lacks it.
func (r *run) user(ctx context.Context, n, name string, force bool) error {
	defer func() { r.st.user = name }()
	if _, ok := lookupUser(r.st.tree, name); ok && !force {
		return nil
	}
	key := r.stepKey(StepUser, name, addUserScript(name, false))
	return r.cached(ctx, n, "USER "+name, key, force, func(w io.Writer) error {
		return r.runInSandbox(ctx, n, addUserScript(name, false), "root", "/", w)
	})
}

// workdir switches the working directory, creating it (owned by the build
// user) when the tree lacks it.
func (r *run) workdir(ctx context.Context, n, dir string, force bool) error {
	if !path.IsAbs(dir) {
		dir = path.Join(r.st.workdir, dir)
	}
	dir = path.Clean(dir)
	defer func() { r.st.workdir = dir }()
	if layer.IsDir(r.st.tree, dir) && !force {
		return nil
	}
	u, ok := lookupUser(r.st.tree, r.st.user)
	if !ok {
		return fmt.Errorf("WORKDIR %s: user %q does not exist", dir, r.st.user)
	}
	key := r.stepKey(StepWorkdir, dir)
	return r.cached(ctx, n, "WORKDIR "+dir, key, force, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(dir, "/") + "/", Mode: 0o755,
			Uid: u.uid, Gid: u.gid, ModTime: time.Now(), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		return tw.Close()
	})
}

// buildBox is one build sandbox.
type buildBox struct {
	id     string
	client *agentclient.Client
}

// boot starts a build sandbox over the current tree.
func (r *run) boot(ctx context.Context) (*buildBox, error) {
	if r.b.cfg.Sandboxes == nil || r.b.cfg.NewSandboxID == nil {
		return nil, fmt.Errorf("this builder cannot run build steps (no sandbox backend)")
	}
	tok := make([]byte, 16)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	req := backend.CreateRequest{
		SandboxID: r.b.cfg.NewSandboxID(), TemplateID: r.req.TemplateID, RootfsDir: r.st.tree, Runtime: r.req.Spec.Runtime,
		CPUCount: max(r.req.CPUCount, 1), MemoryMB: max(r.req.MemoryMB, 1024), DiskSizeMB: r.b.cfg.DiskMB,
		Boot:     agentapi.BootOptions{NoInterpreter: true},
		Init:     agentapi.InitRequest{AccessToken: token, DefaultUser: "root", DefaultWorkdir: "/", Timestamp: time.Now()},
		CABundle: r.b.cfg.Outbound.CABundle,
	}
	inst, err := r.b.cfg.Sandboxes.Create(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("start build sandbox: %w", err)
	}
	return &buildBox{id: req.SandboxID, client: agentclient.New(inst.Addr, inst.HostIface, token)}, nil
}

// kill frees a build sandbox, also when ctx is already cancelled.
func (r *run) kill(ctx context.Context, box *buildBox) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := r.b.cfg.Sandboxes.Kill(kctx, box.id); err != nil {
		r.b.log.Error("free build sandbox", "sandbox", box.id, "err", err)
	}
}

// runInSandbox runs script (by bash -c, or sh -c when the tree has no bash)
// as user in cwd in a build sandbox over the current tree, streams its
// output to the build log, and writes the sandbox's changes to w. A
// non-zero exit is a *StepError with the exit code and the output's tail.
func (r *run) runInSandbox(ctx context.Context, step, script, user, cwd string, w io.Writer) error {
	box, err := r.boot(ctx)
	if err != nil {
		return err
	}
	defer r.kill(ctx, box)
	if !layer.IsDir(r.st.tree, cwd) {
		cwd = "" // the user's home, else /
	}
	shell := "/bin/sh"
	if layer.Exists(r.st.tree, "/bin/bash") {
		shell = "/bin/bash"
	}
	out := newLineLog(func(line string) { r.logf(LevelInfo, step, "%s", line) })
	rctx, cancel := context.WithTimeout(ctx, r.b.cfg.StepTimeout)
	defer cancel()
	code, err := box.client.Run(rctx, agentclient.Process{Cmd: shell, Args: []string{"-c", script}, User: user, Cwd: cwd, Env: r.buildEnv()},
		func(_ bool, b []byte) { out.Write(b) })
	out.Flush()
	var killed *agentclient.KilledError
	if errors.As(err, &killed) {
		return &StepError{Step: step, ExitCode: -1, Err: fmt.Errorf("command %q was killed (%s; the build has %d MiB of memory and %s per step):\n%s",
			describeCmd(script), killed.Status, max(r.req.MemoryMB, 1024), r.b.cfg.StepTimeout, out.Tail())}
	}
	if err != nil {
		return fmt.Errorf("run %q: %w", describeCmd(script), err)
	}
	if code != 0 {
		return &StepError{Step: step, ExitCode: code, Err: fmt.Errorf("command %q exited with code %d:\n%s",
			describeCmd(script), code, out.Tail())}
	}
	return r.b.cfg.Sandboxes.Commit(ctx, box.id, w)
}

// buildEnv is the environment of build commands: the build's variables,
// then the egress proxy and CA variables.
func (r *run) buildEnv() map[string]string {
	env := copyEnv(r.st.env)
	maps.Copy(env, r.b.cfg.Outbound.ProxyEnv)
	if r.b.cfg.Outbound.CABundle != "" {
		maps.Copy(env, agentapi.CAEnv())
	}
	return env
}

// lineLog turns output chunks into log lines and keeps the last ones.
type lineLog struct {
	emit func(string)
	buf  []byte
	tail []string
}

const tailLines = 30

func newLineLog(emit func(string)) *lineLog { return &lineLog{emit: emit} }

// Write implements io.Writer; it never fails. Not safe for concurrent use.
func (l *lineLog) Write(b []byte) (int, error) {
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			if len(l.buf) > 64<<10 { // a very long line: emit what there is
				l.line(string(l.buf))
				l.buf = l.buf[:0]
			}
			return len(b), nil
		}
		l.line(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

func (l *lineLog) line(s string) {
	s = strings.TrimRight(s, "\r")
	if i := strings.LastIndexByte(s, '\r'); i >= 0 { // progress bars redraw with \r
		s = s[i+1:]
	}
	l.emit(s)
	l.tail = append(l.tail, s)
	if len(l.tail) > tailLines {
		l.tail = l.tail[len(l.tail)-tailLines:]
	}
}

// Flush emits an unterminated last line.
func (l *lineLog) Flush() {
	if len(l.buf) > 0 {
		l.line(string(l.buf))
		l.buf = l.buf[:0]
	}
}

// Tail is the last output lines, joined.
func (l *lineLog) Tail() string { return strings.Join(l.tail, "\n") }
