package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// watchExit waits, in the background, for the container's init process to exit
// on its own (the agent crashed, the init was OOM-killed, a runtime failure) and
// then frees the sandbox's resources and forgets it, so Lookup and Stats answer
// backend.ErrNotFound and the control plane records the sandbox as gone. A Kill
// racing with the exit wins: the watcher only acts on a sandbox still registered,
// and an intentional stop (a pause to disk) bumps s.gen first so the watcher of
// the stopped container ignores its exit. The caller holds s.mu (or owns s alone).
func (b *Backend) watchExit(s *sandbox) error {
	rt, err := b.runtimeFor(s.Runtime)
	if err != nil {
		return err
	}
	st, err := rt.State(context.Background(), s.ID)
	if err != nil {
		return fmt.Errorf("state of %s: %w", s.ID, err)
	}
	if st.Pid <= 0 {
		return fmt.Errorf("container %s has no init process", s.ID)
	}
	fd, err := unix.PidfdOpen(st.Pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd of %s init %d: %w", s.ID, st.Pid, err)
	}
	go b.awaitExit(s, fd, s.gen)
	return nil
}

func (b *Backend) awaitExit(s *sandbox, fd, gen int) {
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			b.log.Error("watch sandbox init", "sandbox", s.ID, "err", err)
			return
		}
	}
	if b.closed.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b.mu.Lock()
	current := b.sandboxes[s.ID] == s
	b.mu.Unlock()
	if !current || s.gen != gen {
		return // killed through Kill, or stopped on purpose by a pause
	}
	b.log.Warn("sandbox init exited on its own; freeing its resources", "sandbox", s.ID,
		"output", b.outputTail(s.ID))
	b.closeOutput(s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.destroy(ctx, s.ID, s.Runtime); err != nil {
		b.log.Error("free exited sandbox", "sandbox", s.ID, "err", err)
	}
	b.mu.Lock()
	delete(b.sandboxes, s.ID)
	b.mu.Unlock()
}
