package local

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/runtime"
)

// Recover implements backend.Backend. A sandbox is re-adopted when the store knows
// it, its container is running or paused, its state file is readable and its rootfs
// is still mounted; its network namespace is re-registered. Every container, sandbox
// directory and network namespace that is not adopted is destroyed, so nothing leaks
// across a crash of the server.
func (b *Backend) Recover(ctx context.Context, known []string) ([]backend.Instance, error) {
	want := make(map[string]bool, len(known))
	for _, id := range known {
		want[id] = true
	}
	adopted := map[string]bool{}
	var out []backend.Instance
	var errs []error
	for name, rt := range b.runtimes {
		states, err := rt.List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list %s containers: %w", name, err))
			continue
		}
		for _, st := range states {
			s, err := b.adopt(want, name, st)
			if err != nil {
				b.log.Warn("not re-adopting sandbox; cleaning it up", "sandbox", st.ID, "reason", err)
				if err := b.destroy(ctx, st.ID, name); err != nil {
					errs = append(errs, err)
				}
				continue
			}
			adopted[s.ID] = true
			out = append(out, s.instance())
		}
	}
	errs = append(errs, b.sweepDirs(ctx, adopted)...)
	if err := b.net.Sweep(ctx, adopted); err != nil {
		errs = append(errs, fmt.Errorf("sweep network: %w", err))
	}
	return out, errors.Join(errs...)
}

func (b *Backend) adopt(want map[string]bool, rtName string, st runtime.State) (*sandbox, error) {
	if !want[st.ID] {
		return nil, errors.New("unknown to the store")
	}
	if st.Status != runtime.StatusRunning && st.Status != runtime.StatusPaused {
		return nil, fmt.Errorf("container is %s", st.Status)
	}
	s, err := b.loadState(st.ID)
	if err != nil {
		return nil, err
	}
	if !b.rootfs.Mounted(b.sandboxDir(st.ID)) {
		return nil, errors.New("rootfs no longer mounted")
	}
	if err := b.net.Adopt(st.ID, s.Addr); err != nil {
		return nil, fmt.Errorf("adopt network: %w", err)
	}
	s.Runtime = rtName
	s.Paused = st.Status == runtime.StatusPaused
	b.mu.Lock()
	b.sandboxes[s.ID] = s
	b.mu.Unlock()
	if err := b.watchExit(s); err != nil {
		b.log.Warn("cannot watch sandbox init", "sandbox", s.ID, "err", err)
	}
	return s, nil
}

// sweepDirs destroys sandbox directories that belong to no adopted sandbox.
func (b *Backend) sweepDirs(ctx context.Context, adopted map[string]bool) []error {
	entries, err := os.ReadDir(b.cfg.Dir)
	if err != nil {
		return []error{fmt.Errorf("read sandboxes dir: %w", err)}
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || adopted[e.Name()] {
			continue
		}
		b.log.Info("removing leftover sandbox resources", "sandbox", e.Name())
		if err := b.destroy(ctx, e.Name(), ""); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
