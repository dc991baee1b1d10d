package local

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agentclient"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/layer"
	"github.com/cubby-dev/cubby/internal/rootfs"
)

// readyPoll is the pause between two runs of a template's ready command.
const readyPoll = 500 * time.Millisecond

// runStart starts s's template start command in the background and waits
// until its ready command exits 0 (bounded by StartCommand.ReadyTimeout).
// The caller holds s.mu or owns s alone.
func (b *Backend) runStart(ctx context.Context, s *sandbox) error {
	if s.Start == nil || s.Start.Cmd == "" {
		return nil
	}
	c := b.agentClient(s, s.Init.AccessToken)
	shell := b.shellOf(s)
	if _, err := c.Start(ctx, agentclient.Process{Cmd: shell, Args: []string{"-l", "-c", s.Start.Cmd}, Tag: "start-cmd"}); err != nil {
		return fmt.Errorf("template start command: %w", err)
	}
	if s.Start.ReadyCmd == "" {
		return nil
	}
	limit := s.Start.ReadyTimeout
	if limit <= 0 {
		limit = backend.DefaultReadyTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var out bytes.Buffer
	code := -1
	for {
		out.Reset()
		var err error
		code, err = c.Run(rctx, agentclient.Process{Cmd: shell, Args: []string{"-l", "-c", s.Start.ReadyCmd}},
			func(_ bool, b []byte) { out.Write(b) })
		if err == nil && code == 0 {
			return nil
		}
		select {
		case <-rctx.Done():
			return fmt.Errorf("template ready command %q did not succeed within %v (last exit code %d: %s)",
				s.Start.ReadyCmd, limit, code, strings.TrimSpace(tail(out.String(), 1024)))
		case <-time.After(readyPoll):
		}
	}
}

// shellOf is the shell start and ready commands run with: bash when the
// sandbox's tree has it, else sh.
func (b *Backend) shellOf(s *sandbox) string {
	if layer.Exists(s.Lower, "/bin/bash") {
		return "/bin/bash"
	}
	return "/bin/sh"
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// commitExclude are sandbox paths whose changes are the runtime's and the
// agent's, never the sandbox's own: mount points of the agent binary, CA
// bundle and /etc files, and the agent's state.
var commitExclude = []string{"/opt/cubby", "/run/cubby", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf"}

// Commit stops sandbox id's container and writes the changes its processes
// made to its root filesystem to w as an uncompressed OCI layer tar
// (layer.WriteDiff against the template tree; mount points and agent state
// left out). The sandbox stays registered, stopped: Kill frees it. Template
// builds use it to turn a build step's sandbox into a layer. Errors:
// backend.ErrNotFound, backend.ErrPaused, the runtime's and WriteDiff's.
func (b *Backend) Commit(ctx context.Context, id string, w io.Writer) error {
	s, err := b.lockRunning(id, "commit")
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	rt, err := b.runtimeFor(s.Runtime)
	if err != nil {
		return err
	}
	s.gen++ // the exit watcher must not free the sandbox
	if err := rt.Kill(ctx, id); err != nil {
		return fmt.Errorf("commit %s: stop container: %w", id, err)
	}
	upper := rootfs.UpperDir(b.sandboxDir(id))
	if _, err := layer.WriteDiff(ctx, upper, w, layer.DiffOptions{Exclude: commitExclude, Lower: s.Lower}); err != nil {
		return fmt.Errorf("commit %s: %w", id, err)
	}
	return nil
}
