package template

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

// gcLock is held shared by builds and exclusively by Prune.
const gcLock = "gc"

// lock takes the exclusive flock name in <dir>/.locks, waiting until ctx is done.
func (m *Manager) lock(ctx context.Context, name string) (func(), error) {
	return m.flock(ctx, name, unix.LOCK_EX)
}

// lockShared takes the gc lock shared (builds run side by side; Prune waits).
func (m *Manager) lockShared(ctx context.Context) (func(), error) {
	return m.flock(ctx, gcLock, unix.LOCK_SH)
}

// flock takes lock name in mode (LOCK_SH or LOCK_EX), polling until ctx ends.
func (m *Manager) flock(ctx context.Context, name string, mode int) (func(), error) {
	for {
		unlock, ok, err := m.tryFlock(name, mode)
		if err != nil || ok {
			return unlock, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for lock %s: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tryLock takes the exclusive flock name if it is free; ok is false if
// another holder has it.
func (m *Manager) tryLock(name string) (unlock func(), ok bool, err error) {
	return m.tryFlock(name, unix.LOCK_EX)
}

func (m *Manager) tryFlock(name string, mode int) (unlock func(), ok bool, err error) {
	dir := filepath.Join(m.dir, ".locks")
	if err := os.MkdirAll(m.dir, 0o755); err != nil { // trees below must stay reachable (apt's _apt user)
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := unix.Flock(int(f.Fd()), mode|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock %s: %w", name, err)
	}
	return func() { f.Close() }, true, nil
}

// removeTree detaches any mount at or below dir (a crashed build's chroot mounts
// must never be recursed into) and then deletes dir.
func removeTree(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, mp := range mounts {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s before removing %s: %w", mp, dir, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	var out []string
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// treeSize sums the disk usage (allocated blocks, hard links counted once) of dir in bytes.
func treeSize(dir string) (int64, error) {
	type key struct{ dev, ino uint64 }
	seen := map[key]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			total += fi.Size()
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			k := key{uint64(st.Dev), st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("measure %s: %w", dir, err)
	}
	return total, nil
}
