package userns

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Host-wide layout of sandbox id ranges. Every Cubby server on a host hands
// out ranges of RangeSize ids from the same region, host uids and gids
// FirstHostID up to 2^31-1 (Slots ranges), so that ids stay positive as signed
// 32-bit numbers; nothing else on the host may use these ids. Leases live in
// DefaultLeaseDir, shared by all servers.
const (
	FirstHostID     = 1 << 30
	Slots           = (1<<31 - FirstHostID) / RangeSize
	DefaultLeaseDir = "/run/cubby/userns"
)

// ErrNoRange is returned (wrapped) by Claim when every range of the region is
// leased.
var ErrNoRange = errors.New("no free user namespace id range")

// Allocator leases id ranges to sandboxes, host-wide. A lease is a file in
// its directory named for the range's first host id and holding the owner: the
// absolute path of the sandbox's directory, which exists as long as the
// sandbox does. A lease whose owner path no longer exists is stale (its server
// lost the sandbox without releasing it, e.g. its data directory was deleted)
// and may be taken over. Claim and Release hold an flock(2) on the directory,
// so concurrent servers never hand out the same range. Leases outlive the
// server process (a restarted server re-claims the ranges recorded with its
// sandboxes); the directory need not survive a reboot, as no sandbox process
// does. Safe for concurrent use.
type Allocator struct {
	dir string
}

// NewAllocator returns an Allocator keeping its leases in dir (created on
// first use, mode 0700; missing parents 0711), DefaultLeaseDir when dir is "".
func NewAllocator(dir string) *Allocator {
	if dir == "" {
		dir = DefaultLeaseDir
	}
	return &Allocator{dir: dir}
}

// Dir is the lease directory.
func (a *Allocator) Dir() string { return a.dir }

// Claim leases a range to owner (an absolute path; see Allocator). When prefer
// is a range of the region it is tried first: a lease owner already holds is
// returned as it is (a restarted server re-adopting its sandbox), a free or
// stale one is taken. Otherwise the first free range from a random start is
// leased. Errors wrap ErrNoRange, or come from the lease directory.
func (a *Allocator) Claim(owner string, prefer Range) (Range, error) {
	if !filepath.IsAbs(owner) || strings.ContainsRune(owner, '\n') {
		return Range{}, fmt.Errorf("claim id range: owner %q is not an absolute path", owner)
	}
	var got Range
	err := a.locked(func() error {
		if slot, ok := slotOf(prefer); ok {
			if took, err := a.take(slot, owner); took || err != nil {
				got = rangeOf(slot)
				return err
			}
		}
		start := rand.IntN(Slots)
		for i := range Slots {
			slot := (start + i) % Slots
			took, err := a.take(slot, owner)
			if err != nil {
				return err
			}
			if took {
				got = rangeOf(slot)
				return nil
			}
		}
		return ErrNoRange
	})
	if err != nil {
		return Range{}, fmt.Errorf("claim id range for %s: %w", owner, err)
	}
	return got, nil
}

// Release drops owner's lease of r. A lease held by another owner, or none, is
// left alone (not an error).
func (a *Allocator) Release(owner string, r Range) error {
	slot, ok := slotOf(r)
	if !ok {
		return nil
	}
	err := a.locked(func() error {
		if a.holder(slot) != owner {
			return nil
		}
		return os.Remove(a.path(slot))
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("release id range %s: %w", r, err)
	}
	return nil
}

// ReleaseOwner drops every lease owner holds (for a sandbox whose range was
// not recorded, e.g. after a crash during its creation). It reads every lease.
func (a *Allocator) ReleaseOwner(owner string) error {
	return a.locked(func() error {
		entries, err := os.ReadDir(a.dir)
		if err != nil {
			return fmt.Errorf("release id ranges of %s: %w", owner, err)
		}
		var errs []error
		for _, e := range entries {
			slot, ok := slotOfName(e.Name())
			if ok && a.holder(slot) == owner {
				if err := os.Remove(a.path(slot)); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
				}
			}
		}
		return errors.Join(errs...)
	})
}

// Prune drops every stale lease (its owner path is gone) and returns how many
// it dropped; servers call it at start so leases of sandboxes lost by a crash
// of their server do not pile up. It reads every lease.
func (a *Allocator) Prune() (int, error) {
	n := 0
	err := a.locked(func() error {
		entries, err := os.ReadDir(a.dir)
		if err != nil {
			return err
		}
		var errs []error
		for _, e := range entries {
			slot, ok := slotOfName(e.Name())
			if !ok {
				continue
			}
			if h := a.holder(slot); h == "" || !exists(h) {
				if err := os.Remove(a.path(slot)); err != nil && !errors.Is(err, os.ErrNotExist) {
					errs = append(errs, err)
					continue
				}
				n++
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return n, fmt.Errorf("prune id range leases: %w", err)
	}
	return n, nil
}

// Holder returns the owner of the lease of r, "" when r is not leased.
func (a *Allocator) Holder(r Range) string {
	slot, ok := slotOf(r)
	if !ok {
		return ""
	}
	return a.holder(slot)
}

// take leases slot to owner when it is free, stale or already owner's, and
// reports whether it did. The caller holds the lock.
func (a *Allocator) take(slot int, owner string) (bool, error) {
	f, err := os.OpenFile(a.path(slot), os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, os.ErrExist) {
		switch holder := a.holder(slot); {
		case holder == owner:
			return true, nil
		case holder == "" || !exists(holder): // stale, or emptied by a crash mid-write
			return true, writeLease(a.path(slot), owner)
		}
		return false, nil
	}
	if err != nil {
		return false, err
	}
	_, err = f.WriteString(owner + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(a.path(slot))
		return false, err
	}
	return true, nil
}

// holder reads the owner of slot's lease, "" when there is none or it is
// unreadable or empty.
func (a *Allocator) holder(slot int) string {
	b, err := os.ReadFile(a.path(slot))
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// locked runs fn holding an exclusive flock on the lease directory.
func (a *Allocator) locked(fn func() error) error {
	// Missing parents get 0711: /run/cubby also holds the servers' run
	// directories, which sandboxes' mapped roots must traverse.
	if err := os.MkdirAll(filepath.Dir(a.dir), 0o711); err != nil {
		return err
	}
	if err := os.Mkdir(a.dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	fd, err := unix.Open(a.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", a.dir, err)
	}
	defer unix.Flock(fd, unix.LOCK_UN)
	return fn()
}

func (a *Allocator) path(slot int) string {
	return filepath.Join(a.dir, strconv.FormatUint(uint64(rangeOf(slot).HostID), 10))
}

func rangeOf(slot int) Range {
	return Range{HostID: FirstHostID + uint32(slot)*RangeSize, Size: RangeSize}
}

// slotOf returns the slot of r when r is exactly one range of the region.
func slotOf(r Range) (int, bool) {
	if r.Size != RangeSize || r.HostID < FirstHostID || (r.HostID-FirstHostID)%RangeSize != 0 {
		return 0, false
	}
	slot := int((r.HostID - FirstHostID) / RangeSize)
	return slot, slot < Slots
}

func slotOfName(name string) (int, bool) {
	id, err := strconv.ParseUint(name, 10, 32)
	if err != nil {
		return 0, false
	}
	return slotOf(Range{HostID: uint32(id), Size: RangeSize})
}

// writeLease replaces the lease at path with owner (atomically: a reader sees
// the old or the new owner).
func writeLease(path, owner string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(owner+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, os.ErrNotExist)
}
