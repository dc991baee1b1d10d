package userns

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

func TestClaimDistinctRanges(t *testing.T) {
	a := NewAllocator(filepath.Join(t.TempDir(), "leases"))
	base := t.TempDir()
	seen := map[uint32]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 32 {
		owner := filepath.Join(base, strconv.Itoa(i))
		if err := os.Mkdir(owner, 0o700); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			r, err := a.Claim(owner, Range{})
			if err != nil {
				t.Error(err)
				return
			}
			if r.Size != RangeSize || r.HostID < FirstHostID || uint64(r.HostID)+RangeSize > 1<<31 || r.HostID%RangeSize != 0 {
				t.Errorf("range %v outside the region", r)
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[r.HostID] {
				t.Errorf("range %v handed out twice", r)
			}
			seen[r.HostID] = true
			if got := a.Holder(r); got != owner {
				t.Errorf("holder of %v = %q, want %q", r, got, owner)
			}
		})
	}
	wg.Wait()
}

// Two allocators on the same directory stand for two servers on one host.
func TestClaimAcrossAllocators(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leases")
	a, b := NewAllocator(dir), NewAllocator(dir)
	ownA, ownB := t.TempDir(), t.TempDir()
	ra, err := a.Claim(ownA, Range{})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Claim(ownB, ra) // prefers A's range: must get another
	if err != nil {
		t.Fatal(err)
	}
	if rb == ra {
		t.Fatalf("second server got the first server's range %v", ra)
	}
	if err := b.Release(ownB, ra); err != nil || a.Holder(ra) != ownA {
		t.Fatalf("release by a non-owner dropped the lease: %v, holder %q", err, a.Holder(ra))
	}
}

func TestReclaimAfterRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leases")
	owner := t.TempDir()
	r, err := NewAllocator(dir).Claim(owner, Range{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := NewAllocator(dir).Claim(owner, r) // a restarted server
	if err != nil || again != r {
		t.Fatalf("re-claim = %v, %v; want %v", again, err, r)
	}
	// After a reboot the lease directory is empty: the recorded range is
	// taken again when free.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	again, err = NewAllocator(dir).Claim(owner, r)
	if err != nil || again != r {
		t.Fatalf("claim after lease loss = %v, %v; want %v", again, err, r)
	}
}

func TestStaleLeaseTakenOver(t *testing.T) {
	a := NewAllocator(filepath.Join(t.TempDir(), "leases"))
	gone := filepath.Join(t.TempDir(), "deleted-sandbox")
	if err := os.Mkdir(gone, 0o700); err != nil {
		t.Fatal(err)
	}
	r, err := a.Claim(gone, Range{})
	if err != nil {
		t.Fatal(err)
	}
	owner := t.TempDir()
	if got, err := a.Claim(owner, r); err != nil || got == r {
		t.Fatalf("live lease taken over: %v, %v", got, err)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Claim(owner, r); err != nil || got != r || a.Holder(r) != owner {
		t.Fatalf("stale lease not taken over: %v, %v, holder %q", got, err, a.Holder(r))
	}
}

func TestReleaseFreesRange(t *testing.T) {
	a := NewAllocator(filepath.Join(t.TempDir(), "leases"))
	owner := t.TempDir()
	r1, err := a.Claim(owner, Range{})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Claim(owner+"/x", Range{}) // owner path need not exist for Claim
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(owner, r1); err != nil || a.Holder(r1) != "" {
		t.Fatalf("release: %v, holder %q", err, a.Holder(r1))
	}
	if err := a.ReleaseOwner(owner + "/x"); err != nil || a.Holder(r2) != "" {
		t.Fatalf("release owner: %v, holder %q", err, a.Holder(r2))
	}
	entries, _ := os.ReadDir(a.Dir())
	if len(entries) != 0 {
		t.Fatalf("leases left: %v", entries)
	}
}

func TestClaimRejectsBadInput(t *testing.T) {
	a := NewAllocator(filepath.Join(t.TempDir(), "leases"))
	for _, owner := range []string{"", "relative/dir", "/a\nb"} {
		if _, err := a.Claim(owner, Range{}); err == nil {
			t.Errorf("Claim(%q) succeeded", owner)
		}
	}
	// A preferred range outside the region is ignored, not honoured.
	r, err := a.Claim(t.TempDir(), Range{HostID: 1000, Size: RangeSize})
	if err != nil || r.HostID < FirstHostID {
		t.Fatalf("claim with foreign preference = %v, %v", r, err)
	}
}

func TestRegionExhausted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leases")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	live := t.TempDir()
	for slot := range Slots {
		if err := os.WriteFile(NewAllocator(dir).path(slot), []byte(live+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewAllocator(dir).Claim(t.TempDir(), Range{}); !errors.Is(err, ErrNoRange) {
		t.Fatalf("claim in a full region: %v, want ErrNoRange", err)
	}
}

func TestPruneDropsOnlyStale(t *testing.T) {
	a := NewAllocator(filepath.Join(t.TempDir(), "leases"))
	live := t.TempDir()
	gone := filepath.Join(t.TempDir(), "gone")
	rl, err := a.Claim(live, Range{})
	if err != nil {
		t.Fatal(err)
	}
	rg, err := a.Claim(gone, Range{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := a.Prune(); err != nil || n != 1 {
		t.Fatalf("Prune = %d, %v; want 1", n, err)
	}
	if a.Holder(rl) != live || a.Holder(rg) != "" {
		t.Fatalf("after prune: live held by %q, stale by %q", a.Holder(rl), a.Holder(rg))
	}
}
