package template

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cubby-dev/cubby/internal/layer"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
)

// fromDebian makes the base tree with mmdebstrap (cached by suite, variant
// and packages; stored as one layer like any other) and provisions it.
func (r *run) fromDebian(ctx context.Context) error {
	d := r.req.Spec.From.Debian
	what := fmt.Sprintf("[base] FROM debian %s (%s, %d packages)", d.Suite, d.Variant, len(d.Packages))
	r.logf(LevelInfo, StepBase, "%s", what)
	r.st = state{shippable: true, env: map[string]string{}}
	key := r.stepKey("debootstrap", d.Suite, d.Variant, strings.Join(d.Packages, ","))
	if e, ok := r.b.m.cacheGet(key); ok && e.Layer != nil && !r.req.Spec.Force {
		st, err := r.b.m.applyStored(ctx, r.st, *e.Layer)
		if err != nil {
			return err
		}
		st.env = r.st.env
		r.st = st
		r.logf(LevelInfo, StepBase, "CACHED %s", what)
		return r.provision(ctx)
	}
	if err := r.debootstrap(ctx, key); err != nil {
		return err
	}
	return r.provision(ctx)
}

// debootstrap runs mmdebstrap into a staging tree, stores the tree as a
// layer and commits it.
func (r *run) debootstrap(ctx context.Context, key string) error {
	m := r.b.m
	staging, dst, err := m.stage(ctx, "")
	if err != nil {
		return err
	}
	defer removeTree(staging)
	tmp := filepath.Join(staging, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return err
	}
	began := time.Now()
	if err := r.mmdebstrap(ctx, dst, tmp); err != nil {
		return err
	}
	// mmdebstrap's device nodes: sandboxes mount their own /dev.
	if entries, err := os.ReadDir(filepath.Join(dst, "dev")); err == nil {
		for _, e := range entries {
			os.RemoveAll(filepath.Join(dst, "dev", e.Name()))
		}
	}
	// Debian's ping is cap_net_raw+ep, which sandboxes cannot execute
	// (applyOptions drops such capabilities from every other tree).
	if _, err := dropUngrantableCaps(dst, oci.GrantedCaps()); err != nil {
		return err
	}
	l, _, err := m.store.WriteLayer(ctx, func(w io.Writer) error {
		_, err := layer.WriteDiff(ctx, dst, w, layer.DiffOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("store debootstrap layer: %w", err)
	}
	next, err := m.commitTree(r.st, l, dst)
	if err != nil {
		return err
	}
	next.env = r.st.env
	r.st = next
	if err := m.cachePut(key, cacheEntry{Layer: &l}); err != nil {
		r.b.log.Warn("debootstrap not cached", "err", err)
	}
	r.logf(LevelInfo, StepBase, "Debian tree %.1f MiB in %s", float64(l.Size)/(1<<20), time.Since(began).Round(time.Second))
	return nil
}

// mmdebstrap runs mmdebstrap (root mode) in its own mount and PID
// namespace, so its chroot mounts never reach the host and killing it kills
// every process it started. Output lines go to the build log.
func (r *run) mmdebstrap(ctx context.Context, rootfs, tmp string) error {
	d := r.req.Spec.From.Debian
	args := []string{"--mode=root", "--format=directory", "--variant=" + d.Variant,
		"--include=" + strings.Join(d.Packages, ","), d.Suite, rootfs}
	out := newLineLog(func(line string) { r.logf(LevelInfo, StepBase, "%s", line) })
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "LC_ALL=C.UTF-8")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:      true,
		Pdeathsig:    syscall.SIGKILL,
		Cloneflags:   syscall.CLONE_NEWPID,
		Unshareflags: syscall.CLONE_NEWNS, // Go makes / recursively private in the child
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	out.Flush()
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("mmdebstrap cancelled: %w", ctxErr)
	}
	if err != nil {
		return fmt.Errorf("mmdebstrap %s: %w; last output:\n%s", d.Suite, err, out.Tail())
	}
	return nil
}
