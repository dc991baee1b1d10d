package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/runtime"
)

// container is a container some runtime reported at recovery.
type container struct {
	rt    runtime.Runtime
	state runtime.State
}

// Recover implements backend.Backend. A sandbox the store knows is re-adopted
// from its state file (sandbox.json) and what really exists:
//   - running or frozen container, rootfs mounted: adopted running or paused
//     (memory), as the runtime reports;
//   - filesystem pause recorded: any container is stopped (finishing an
//     interrupted pause or resume) and the sandbox is adopted paused, its disk
//     image kept;
//   - checkpoint recorded: a live container means the checkpoint did not finish
//     (adopted running, partial image removed); otherwise a complete image is
//     adopted paused (checkpoint), an incomplete one is lost.
//
// Its id range is leased again (see reclaimIDs) and its network namespace is
// re-registered. Every container, sandbox directory,
// mount and network namespace that is not adopted is destroyed, so nothing leaks
// across a crash of the server.
func (b *Backend) Recover(ctx context.Context, known []string) ([]backend.Instance, error) {
	found, errs := b.listContainers(ctx)
	adopted := map[string]bool{}
	var out []backend.Instance
	for _, id := range known {
		c, hasContainer := found[id]
		s, err := b.adopt(ctx, id, c, hasContainer)
		if err != nil {
			b.log.Warn("not re-adopting sandbox; cleaning it up", "sandbox", id, "reason", err)
			continue
		}
		adopted[id] = true
		out = append(out, b.instance(s))
	}
	for id, c := range found {
		if adopted[id] {
			continue
		}
		if err := b.destroy(ctx, id, c.rt.Name()); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, b.sweepDirs(ctx, adopted)...)
	if err := b.net.Sweep(ctx, adopted); err != nil {
		errs = append(errs, fmt.Errorf("sweep network: %w", err))
	}
	return out, errors.Join(errs...)
}

// listContainers returns every container of every runtime by ID.
func (b *Backend) listContainers(ctx context.Context) (map[string]container, []error) {
	found := map[string]container{}
	var errs []error
	for name, rt := range b.runtimes {
		states, err := rt.List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s containers: %w", name, err))
			continue
		}
		for _, st := range states {
			found[st.ID] = container{rt: rt, state: st}
		}
	}
	return found, errs
}

// adopt reconciles one known sandbox and registers it.
func (b *Backend) adopt(ctx context.Context, id string, c container, hasContainer bool) (*sandbox, error) {
	s, err := b.loadState(id)
	if err != nil {
		return nil, err
	}
	if hasContainer {
		s.Runtime = c.rt.Name()
	}
	adoptCredential(s)
	rootfs.Thaw(b.sandboxDir(id)) // a capture the server died in froze the disk
	if err := b.reclaimIDs(ctx, s, hasContainer && alive(c.state)); err != nil {
		return nil, fmt.Errorf("re-claim id range: %w", err)
	}
	var running bool
	switch {
	case s.PauseMode == backend.PauseFilesystem:
		err = b.adoptStopped(ctx, s, c, hasContainer)
	case s.PauseMode == backend.PauseCheckpoint && (!hasContainer || !alive(c.state)):
		err = b.adoptCheckpointed(ctx, s, c, hasContainer)
	case hasContainer:
		running, err = b.adoptContainer(s, c)
	default:
		err = errors.New("its container is gone")
	}
	if err != nil {
		return nil, err
	}
	if err := b.adoptNetwork(ctx, s); err != nil {
		if !s.Paused || s.PauseMode == backend.PauseMemory {
			return nil, fmt.Errorf("adopt network: %w", err)
		}
		// A sandbox stopped on disk gets a new network when it starts again.
		b.log.Warn("network of paused sandbox is gone; it is rebuilt at resume", "sandbox", id, "reason", err)
	}
	if err := b.saveState(s); err != nil {
		return nil, err
	}
	if err := b.openOutput(s); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.sandboxes[s.ID] = s
	b.mu.Unlock()
	b.useLayers(s)
	if err := b.useVolumes(s); err != nil {
		b.log.Warn("volumes of adopted sandbox", "sandbox", s.ID, "err", err)
	}
	if running {
		if err := b.watchExit(s); err != nil {
			b.log.Warn("cannot watch sandbox init", "sandbox", s.ID, "err", err)
		}
	}
	if running && !s.Paused {
		if err := b.rekey(ctx, s); err != nil {
			b.log.Error("adopted sandbox keeps its old credential: gateway requests to it will be refused", "sandbox", s.ID, "err", err)
		}
	}
	return s, nil
}

// adoptNetwork re-registers the network of s and applies its recorded internet
// access again (a table built by an older server may not have kept it).
func (b *Backend) adoptNetwork(ctx context.Context, s *sandbox) error {
	if err := b.net.Adopt(s.ID, s.Addr); err != nil {
		return err
	}
	if s.NoInternet {
		return b.net.SetInternetAccess(ctx, s.ID, false)
	}
	return nil
}

func alive(st runtime.State) bool {
	return st.Status == runtime.StatusRunning || st.Status == runtime.StatusPaused
}

// adoptContainer adopts a sandbox whose container exists and should be running or
// frozen; it reports whether the container has a live init to watch.
func (b *Backend) adoptContainer(s *sandbox, c container) (bool, error) {
	if !alive(c.state) {
		return false, fmt.Errorf("container is %s", c.state.Status)
	}
	if !b.rootfs.Mounted(b.disk(s)) {
		return false, errors.New("rootfs no longer mounted")
	}
	if s.PauseMode == backend.PauseCheckpoint {
		b.log.Info("checkpoint interrupted by the restart; sandbox keeps running", "sandbox", s.ID)
		_ = emptyDir(b.checkpointDir(s.ID))
	}
	s.Paused = c.state.Status == runtime.StatusPaused
	s.PauseMode = ""
	if s.Paused {
		s.PauseMode = backend.PauseMemory
	}
	return true, nil
}

// adoptStopped adopts a sandbox paused (or being paused or resumed) in filesystem
// mode: any container is stopped and the disk unmounted; the image must exist.
func (b *Backend) adoptStopped(ctx context.Context, s *sandbox, c container, hasContainer bool) error {
	if err := b.keepDisk(s); err != nil {
		return err
	}
	if hasContainer {
		if err := c.rt.Kill(ctx, s.ID); err != nil {
			return fmt.Errorf("stop container of paused sandbox: %w", err)
		}
	}
	if err := b.rootfs.Unmount(ctx, b.disk(s)); err != nil {
		b.log.Warn("unmount rootfs of paused sandbox", "sandbox", s.ID, "err", err)
	}
	s.Paused = true
	return nil
}

// adoptCheckpointed adopts a sandbox whose container is gone or stopped after a
// checkpoint; the image must be complete.
func (b *Backend) adoptCheckpointed(ctx context.Context, s *sandbox, c container, hasContainer bool) error {
	if !b.checkpointComplete(s.ID) {
		return errors.New("checkpoint image is incomplete and the container is gone")
	}
	if err := b.keepDisk(s); err != nil {
		return err
	}
	if hasContainer {
		if err := c.rt.Kill(ctx, s.ID); err != nil {
			return fmt.Errorf("delete checkpointed container: %w", err)
		}
	}
	if err := b.rootfs.Unmount(ctx, b.disk(s)); err != nil {
		b.log.Warn("unmount rootfs of paused sandbox", "sandbox", s.ID, "err", err)
	}
	s.Paused = true
	return nil
}

// keepDisk checks that the disk image of a stopped sandbox survived.
func (b *Backend) keepDisk(s *sandbox) error {
	if _, err := os.Stat(filepath.Join(b.sandboxDir(s.ID), rootfs.ImageName)); err != nil {
		return fmt.Errorf("disk image of paused sandbox: %w", err)
	}
	return nil
}

// sweepDirs destroys the sandbox directories (in Dir and RunDir) that belong
// to no adopted sandbox.
func (b *Backend) sweepDirs(ctx context.Context, adopted map[string]bool) []error {
	var errs []error
	seen := map[string]bool{}
	for _, dir := range []string{b.cfg.Dir, b.cfg.RunDir} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("read sandboxes dir: %w", err))
			continue
		}
		for _, e := range entries {
			id := e.Name()
			if !e.IsDir() || adopted[id] || seen[id] {
				continue
			}
			seen[id] = true
			b.log.Info("removing leftover sandbox resources", "sandbox", id)
			if err := b.destroy(ctx, id, ""); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}
