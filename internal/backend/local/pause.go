package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/runtime"
)

// Names inside a sandbox directory used by pauses to disk.
const (
	// checkpointDirName holds the runtime's checkpoint image while the sandbox is
	// paused in backend.PauseCheckpoint mode.
	checkpointDirName = "checkpoint"
	// checkpointDoneName is written into the image directory once the checkpoint
	// completed; an image without it is never restored.
	checkpointDoneName = ".cubby-complete"
)

func (b *Backend) checkpointDir(id string) string {
	return filepath.Join(b.sandboxDir(id), checkpointDirName)
}

func (b *Backend) bundleDir(id string) string { return filepath.Join(b.sandboxDir(id), "bundle") }

// checkpointComplete reports whether sandbox id has a finished checkpoint image.
func (b *Backend) checkpointComplete(id string) bool {
	_, err := os.Stat(filepath.Join(b.checkpointDir(id), checkpointDoneName))
	return err == nil
}

// lockLive returns the registered sandbox id with its mutex held, or ErrNotFound.
func (b *Backend) lockLive(id string) (*sandbox, error) {
	s, err := b.get(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if !b.current(s) {
		s.mu.Unlock()
		return nil, fmt.Errorf("sandbox %s: %w", id, backend.ErrNotFound)
	}
	return s, nil
}

// Pause implements backend.Backend. The mode: opts.KeepMemory=false stops the
// container and keeps its disk and address (backend.PauseFilesystem); otherwise a
// runtime that can checkpoint saves the processes to <sandbox dir>/checkpoint and
// stops (backend.PauseCheckpoint), and any other runtime freezes the cgroup
// (backend.PauseMemory). A failed pause leaves the sandbox running.
func (b *Backend) Pause(ctx context.Context, id string, opts backend.PauseOptions) (backend.PauseMode, error) {
	s, err := b.lockLive(id)
	if err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	if s.Paused {
		return "", fmt.Errorf("pause %s: %w", id, backend.ErrPaused)
	}
	rt, err := b.runtimeFor(s.Runtime)
	if err != nil {
		return "", err
	}
	cp, canCheckpoint := rt.(runtime.Checkpointer)
	switch {
	case !opts.KeepMemory:
		err = b.pauseFilesystem(ctx, s, rt)
	case canCheckpoint:
		err = b.pauseCheckpoint(ctx, s, rt, cp)
	default:
		err = b.pauseMemory(ctx, s, rt)
	}
	if err != nil {
		return "", fmt.Errorf("pause %s: %w", id, err)
	}
	b.log.Info("sandbox paused", "sandbox", id, "mode", s.PauseMode)
	s.out.Note(slog.LevelInfo, "sandbox paused", "mode", s.PauseMode)
	return s.PauseMode, nil
}

// pauseMemory freezes the container's cgroup; memory stays resident.
func (b *Backend) pauseMemory(ctx context.Context, s *sandbox, rt runtime.Runtime) error {
	if err := rt.Pause(ctx, s.ID); err != nil {
		return fmt.Errorf("freeze: %w", err)
	}
	s.Paused, s.PauseMode = true, backend.PauseMemory
	if err := b.saveState(s); err != nil {
		s.Paused, s.PauseMode = false, ""
		if rerr := rt.Resume(context.WithoutCancel(ctx), s.ID); rerr != nil {
			return errors.Join(err, fmt.Errorf("thaw after failed pause: %w", rerr))
		}
		return err
	}
	return nil
}

// pauseFilesystem records the intent, stops the container (freeing its memory and
// cgroup) and unmounts the root filesystem, keeping disk.img and the network.
func (b *Backend) pauseFilesystem(ctx context.Context, s *sandbox, rt runtime.Runtime) error {
	s.Paused, s.PauseMode = true, backend.PauseFilesystem
	if err := b.saveState(s); err != nil {
		s.Paused, s.PauseMode = false, ""
		return err
	}
	s.gen++
	if err := rt.Kill(ctx, s.ID); err != nil {
		return b.undoStop(ctx, s, rt, fmt.Errorf("stop container: %w", err))
	}
	if err := b.rootfs.Unmount(ctx, b.disk(s)); err != nil {
		// Resume remounts an overlay that is still mounted; Kill releases it.
		b.log.Warn("unmount rootfs of paused sandbox", "sandbox", s.ID, "err", err)
	}
	return nil
}

// pauseCheckpoint saves the container with the runtime's checkpoint, then deletes
// the stopped container and unmounts the root filesystem.
func (b *Backend) pauseCheckpoint(ctx context.Context, s *sandbox, rt runtime.Runtime, cp runtime.Checkpointer) error {
	img := b.checkpointDir(s.ID)
	if err := emptyDir(img); err != nil {
		return fmt.Errorf("prepare checkpoint dir: %w", err)
	}
	s.PauseMode = backend.PauseCheckpoint // intent; Paused stays false until complete
	if err := b.saveState(s); err != nil {
		s.PauseMode = ""
		return err
	}
	s.gen++
	err := cp.Checkpoint(ctx, s.ID, img)
	if err == nil {
		err = os.WriteFile(filepath.Join(img, checkpointDoneName), nil, 0o600)
	}
	if err != nil {
		return b.undoStop(ctx, s, rt, fmt.Errorf("checkpoint: %w", err))
	}
	s.Paused = true
	if err := b.saveState(s); err != nil {
		s.Paused = false
		return b.undoStop(ctx, s, rt, err)
	}
	if err := rt.Kill(ctx, s.ID); err != nil {
		b.log.Warn("delete checkpointed container", "sandbox", s.ID, "err", err)
	}
	if err := b.rootfs.Unmount(ctx, b.disk(s)); err != nil {
		b.log.Warn("unmount rootfs of paused sandbox", "sandbox", s.ID, "err", err)
	}
	return nil
}

// undoStop brings a sandbox whose pause to disk failed back to running and returns
// cause. A container that survived is thawed and watched again; one that is gone
// is started afresh from its disk (processes restart, files are kept). When even
// that fails the sandbox stays registered as paused in filesystem mode, so its
// disk is kept and a later resume or kill handles it.
func (b *Backend) undoStop(ctx context.Context, s *sandbox, rt runtime.Runtime, cause error) error {
	ctx = context.WithoutCancel(ctx)
	_ = emptyDir(b.checkpointDir(s.ID))
	st, err := rt.State(ctx, s.ID)
	if err == nil && st.Status == runtime.StatusPaused {
		err = rt.Resume(ctx, s.ID)
		st.Status = runtime.StatusRunning
	}
	if err == nil && st.Status == runtime.StatusRunning {
		s.Paused, s.PauseMode = false, ""
		if werr := b.watchExit(s); werr != nil {
			b.log.Warn("cannot watch sandbox init", "sandbox", s.ID, "err", werr)
		}
		return errors.Join(cause, b.saveState(s))
	}
	s.Paused, s.PauseMode = true, backend.PauseFilesystem
	if err := b.restart(ctx, s, rt); err != nil {
		b.log.Error("sandbox stopped by a failed pause could not restart; kept paused (filesystem)",
			"sandbox", s.ID, "err", err)
		return errors.Join(cause, b.saveState(s), fmt.Errorf("restart: %w", err))
	}
	s.Paused, s.PauseMode = false, ""
	return errors.Join(cause, b.saveState(s))
}

// Resume implements backend.Backend per the pause mode: thaw (memory), start the
// container again from its disk and re-initialise the agent (filesystem), or
// restore the checkpoint (checkpoint). A failed resume leaves the sandbox paused.
func (b *Backend) Resume(ctx context.Context, id string) (backend.Instance, error) {
	s, err := b.lockLive(id)
	if err != nil {
		return backend.Instance{}, err
	}
	defer s.mu.Unlock()
	if !s.Paused {
		return backend.Instance{}, fmt.Errorf("resume %s: %w", id, backend.ErrNotPaused)
	}
	rt, err := b.runtimeFor(s.Runtime)
	if err != nil {
		return backend.Instance{}, err
	}
	start := time.Now()
	switch s.PauseMode {
	case backend.PauseFilesystem:
		err = b.restart(ctx, s, rt)
	case backend.PauseCheckpoint:
		err = b.restore(ctx, s, rt)
	default:
		err = rt.Resume(ctx, id)
	}
	if err != nil {
		return backend.Instance{}, fmt.Errorf("resume %s (%s): %w", id, s.PauseMode, err)
	}
	mode := s.PauseMode
	s.Paused, s.PauseMode = false, ""
	if err := b.saveState(s); err != nil {
		return backend.Instance{}, fmt.Errorf("resume %s: %w", id, err)
	}
	if err := b.rekey(ctx, s); err != nil {
		b.log.Error("resumed sandbox keeps its old credential: gateway requests to it will be refused", "sandbox", id, "err", err)
	}
	if mode == backend.PauseCheckpoint {
		_ = emptyDir(b.checkpointDir(id))
	}
	b.log.Info("sandbox resumed", "sandbox", id, "mode", mode, "took", time.Since(start))
	s.out.Note(slog.LevelInfo, "sandbox resumed", "mode", mode)
	return b.instance(s), nil
}

// restart starts a sandbox stopped by a filesystem pause again: remount its disk,
// check its network, start the container from the same bundle and re-initialise
// the agent. On error the container is removed and the disk unmounted again.
func (b *Backend) restart(ctx context.Context, s *sandbox, rt runtime.Runtime) (err error) {
	if err := b.prepareStart(ctx, s, rt); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			b.unwindStart(ctx, s, rt)
		}
	}()
	if err := b.newBootID(s); err != nil {
		return err
	}
	if err := b.startContainer(ctx, s, rt); err != nil {
		return err
	}
	if err := b.initAgent(ctx, s, s.agentToken()); err != nil {
		return fmt.Errorf("%w (sandbox output: %s)", err, b.outputTail(s.ID))
	}
	s.Rekey, s.MemoryHeldToken = "", false // a new agent process, initialised with its link credential
	if err := b.runStart(ctx, s); err != nil {
		return err
	}
	if err := b.watchExit(s); err != nil {
		b.log.Warn("cannot watch sandbox init", "sandbox", s.ID, "err", err)
	}
	return nil
}

// restore runs a checkpointed sandbox again from its image.
func (b *Backend) restore(ctx context.Context, s *sandbox, rt runtime.Runtime) (err error) {
	cp, ok := rt.(runtime.Checkpointer)
	if !ok {
		return fmt.Errorf("runtime %s cannot restore: %w", rt.Name(), backend.ErrNotSupported)
	}
	if !b.checkpointComplete(s.ID) {
		return errors.New("checkpoint image is incomplete")
	}
	if err := b.prepareStart(ctx, s, rt); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			b.unwindStart(ctx, s, rt)
		}
	}()
	if err := b.restoreContainer(ctx, s, rt, cp, b.checkpointDir(s.ID)); err != nil {
		return err
	}
	readyCtx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	if err := b.agentClient(s, "").WaitHealthy(readyCtx, 3*time.Millisecond); err != nil {
		return fmt.Errorf("wait for restored agent: %w (sandbox output: %s)", err, b.outputTail(s.ID))
	}
	if err := b.watchExit(s); err != nil {
		b.log.Warn("cannot watch sandbox init", "sandbox", s.ID, "err", err)
	}
	return nil
}

// prepareStart removes any leftover container record so the ID can be created
// again, re-checks the network namespace (and the user namespace, rebuilt with
// it), the run dir and the bundle's id mapping, and remounts the disk.
func (b *Backend) prepareStart(ctx context.Context, s *sandbox, rt runtime.Runtime) error {
	if err := rt.Kill(ctx, s.ID); err != nil {
		return fmt.Errorf("remove leftover container: %w", err)
	}
	if err := b.ensureNetwork(ctx, s); err != nil {
		return err
	}
	if err := b.prepareRunDir(s); err != nil {
		return err
	}
	if err := b.syncBundleIDs(s, rt); err != nil {
		return err
	}
	if err := b.useVolumes(s); err != nil {
		return err
	}
	if err := b.mountViews(s); err != nil {
		return err
	}
	if _, err := b.rootfs.Remount(ctx, b.disk(s), s.Lower); err != nil {
		return fmt.Errorf("remount rootfs: %w", err)
	}
	return nil
}

// unwindStart undoes a failed restart or restore: container gone, disk unmounted.
func (b *Backend) unwindStart(ctx context.Context, s *sandbox, rt runtime.Runtime) {
	ctx = context.WithoutCancel(ctx)
	s.gen++
	if err := rt.Kill(ctx, s.ID); err != nil {
		b.log.Warn("remove container after failed start", "sandbox", s.ID, "err", err)
	}
	if err := b.rootfs.Unmount(ctx, b.disk(s)); err != nil {
		b.log.Warn("unmount rootfs after failed start", "sandbox", s.ID, "err", err)
	}
}

// emptyDir creates dir if needed and removes everything inside it (the directory
// itself stays: it may be a mount point).
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
