package runsc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cubby-dev/cubby/internal/runtime"
)

// Checkpoint saves container id into imageDir (created if missing) and destroys
// it: it pauses the container (`runsc pause`), runs `runsc checkpoint
// --leave-running --image-path imageDir id` (the state of the gVisor kernel and of
// every process: checkpoint.img, pages.img, pages_meta.img, uncompressed), then
// deletes the container (`runsc delete --force`), waits for the sandbox process to
// be gone and puts the network namespace's addresses back. Pausing first means no
// process runs, and no file changes, between the image and the kill. With Overlay
// "none" the files of the container are not in the image: they stay in the bundle's
// root filesystem, which must be unchanged at Restore.
//
// If the checkpoint fails (e.g. ENOSPC on imageDir) the container is resumed and
// keeps running (a plain `runsc checkpoint` would leave a dead sandbox behind),
// imageDir may hold a partial image, and the error carries runsc's message. Errors wrap runtime.ErrNotFound for unknown
// containers.
func (r *Runtime) Checkpoint(ctx context.Context, id, imageDir string) error {
	st, err := r.State(ctx, id)
	if err != nil {
		return fmt.Errorf("runsc checkpoint %s: %w", id, err)
	}
	if !filepath.IsAbs(imageDir) {
		return fmt.Errorf("runsc checkpoint %s: image dir %q is not absolute", id, imageDir)
	}
	if st.Status != runtime.StatusRunning && st.Status != runtime.StatusPaused {
		return fmt.Errorf("runsc checkpoint %s: container is %s", id, st.Status)
	}
	if st.Status == runtime.StatusRunning {
		if err := r.Pause(ctx, id); err != nil {
			return fmt.Errorf("runsc checkpoint %s: %w", id, err)
		}
	}
	if _, err := r.cli.Run(ctx, "checkpoint", "--leave-running", "--image-path", imageDir, id); err != nil {
		if st.Status == runtime.StatusRunning {
			if rerr := r.Resume(context.WithoutCancel(ctx), id); rerr != nil {
				return errors.Join(err, rerr)
			}
		}
		return err
	}
	if err := r.destroy(ctx, st); err != nil {
		return fmt.Errorf("runsc checkpoint %s: saved, but: %w", id, err)
	}
	r.restoreNet(st.Bundle)
	r.log.Debug("container checkpointed", "id", id, "image", imageDir)
	return nil
}

// Restore runs `runsc restore --detach --bundle bundle --pid-file bundle/init.pid
// --image-path imageDir id`, which creates container id from the bundle and
// resumes the processes saved by Checkpoint (running, also when the container was
// paused at Checkpoint), their stdout and stderr on output. The addresses
// recorded at Start are put back into the network namespace
// first if it has none (runsc takes them over again, and its restored network
// stack is configured from the namespace, not from the image). The container must
// not exist. On error nothing of it is left.
//
// runsc compares the bundle's spec with the image's and, by default, refuses
// any difference beyond mount sources, namespace and cgroup paths, hostname
// and environment; Restore runs it with --restore-spec-validation=warning
// because a sandbox restored from another's image (a fork) differs in one
// more field by design: the host ID range of its user namespace (its own,
// never shared). The inside of both is the same (IDs 0..65535 map to files
// idmapped the same way), and both specs are written by the same code.
func (r *Runtime) Restore(ctx context.Context, id, bundle, imageDir string, output *os.File) error {
	if err := r.cli.CheckID(id); err != nil {
		return err
	}
	if !filepath.IsAbs(bundle) || !filepath.IsAbs(imageDir) {
		return fmt.Errorf("runsc restore %s: bundle %q and image dir %q must be absolute", id, bundle, imageDir)
	}
	if _, err := r.State(ctx, id); err == nil {
		return fmt.Errorf("runsc restore %s: container exists", id)
	} else if !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("runsc restore %s: %w", id, err)
	}
	if err := r.reapplyNet(bundle); err != nil {
		return fmt.Errorf("runsc restore %s: %w", id, err)
	}
	err := r.cli.Launch(ctx, id, output, "--restore-spec-validation=warning", "restore", "--detach", "--bundle", bundle,
		"--pid-file", filepath.Join(bundle, PidFileName), "--image-path", imageDir, id)
	if err != nil {
		r.cleanup(ctx, id, bundle)
		return err
	}
	r.log.Debug("container restored", "id", id, "image", imageDir)
	return nil
}

var _ runtime.Snapshotter = (*Runtime)(nil)

// CheckpointRunning implements runtime.Snapshotter: `runsc pause id`, `runsc
// checkpoint --leave-running --image-path imageDir id` (the gVisor kernel
// writes its state and every process's memory, flushing cached file data to
// the host first), hold, then `runsc resume id`. The container is paused from
// the first command to the last (the gVisor kernel counts external stops:
// the checkpoint ends its own, the pause's holds until the resume); the
// returned duration is that span. The container must be running.
func (r *Runtime) CheckpointRunning(ctx context.Context, id, imageDir string, hold func() error) (time.Duration, error) {
	st, err := r.State(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("runsc checkpoint %s: %w", id, err)
	}
	if !filepath.IsAbs(imageDir) {
		return 0, fmt.Errorf("runsc checkpoint %s: image dir %q is not absolute", id, imageDir)
	}
	if st.Status != runtime.StatusRunning {
		return 0, fmt.Errorf("runsc checkpoint %s: container is %s", id, st.Status)
	}
	start := time.Now()
	if err := r.Pause(ctx, id); err != nil {
		return 0, fmt.Errorf("runsc checkpoint %s: %w", id, err)
	}
	_, err = r.cli.Run(ctx, "checkpoint", "--leave-running", "--image-path", imageDir, id)
	if err == nil && hold != nil {
		err = hold()
	}
	rerr := r.Resume(context.WithoutCancel(ctx), id)
	held := time.Since(start)
	if err = errors.Join(err, rerr); err != nil {
		return held, fmt.Errorf("runsc checkpoint %s: %w", id, err)
	}
	r.log.Debug("container checkpointed, still running", "id", id, "image", imageDir, "held", held)
	return held, nil
}
