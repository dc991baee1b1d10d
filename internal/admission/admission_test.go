package admission

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func refused(t *testing.T, err error, want string) {
	t.Helper()
	var ae *Error
	if !errors.As(err, &ae) || !strings.Contains(ae.Message, want) {
		t.Fatalf("err = %v, want an *Error containing %q", err, want)
	}
}

func TestTeamSandboxCap(t *testing.T) {
	c := New(Limits{TeamSandboxes: 2})
	a, err := c.Admit("t1", 512)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Admit("t1", 512); err != nil {
		t.Fatal(err)
	}
	_, err = c.Admit("t1", 512)
	refused(t, err, "limit of 2 live sandboxes")
	if _, err := c.Admit("t2", 512); err != nil {
		t.Fatalf("another team is refused: %v", err)
	}
	a.Release()
	a.Release() // idempotent
	if n, mb, _ := c.Usage("t1"); n != 1 || mb != 512 {
		t.Fatalf("usage after release = %d, %d", n, mb)
	}
	if _, err := c.Admit("t1", 512); err != nil {
		t.Fatalf("released slot refused: %v", err)
	}
}

func TestMemoryCaps(t *testing.T) {
	c := New(Limits{TeamMemoryMB: 1024, ServerMemoryMB: 1536})
	if _, err := c.Admit("t1", 1024); err != nil {
		t.Fatal(err)
	}
	_, err := c.Admit("t1", 1)
	refused(t, err, "team \"t1\" has reached its memory limit: its live sandboxes hold 1024 of 1024 MiB")
	b, err := c.Admit("t2", 512)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Admit("t3", 1)
	refused(t, err, "the server is at capacity: live sandboxes hold 1536 of 1536 MiB")
	b.Release()
	if _, err := c.Admit("t3", 512); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	if _, _, server := c.Usage("t3"); server != 1536 {
		t.Fatalf("server usage = %d", server)
	}
}

func TestHoldIgnoresLimits(t *testing.T) {
	c := New(Limits{TeamSandboxes: 1, CreateRate: 1, CreateBurst: 1})
	c.Hold("t1", 100)
	c.Hold("t1", 100) // re-adopted after a restart: counted even above the cap
	if n, mb, _ := c.Usage("t1"); n != 2 || mb != 200 {
		t.Fatalf("usage = %d, %d", n, mb)
	}
	_, err := c.Admit("t1", 100)
	refused(t, err, "limit of 1 live sandboxes")
}

func TestCreateRate(t *testing.T) {
	c := New(Limits{CreateRate: 5, CreateBurst: 3})
	for i := range 3 {
		if _, err := c.Admit("t1", 1); err != nil {
			t.Fatalf("create %d within the burst: %v", i, err)
		}
	}
	_, err := c.Admit("t1", 1)
	refused(t, err, "faster than the limit of 5 per second (burst 3)")
	var ae *Error
	errors.As(err, &ae)
	if ae.RetryAfter <= 0 || ae.RetryAfter > 200*time.Millisecond {
		t.Fatalf("RetryAfter = %v, want (0, 200ms]", ae.RetryAfter)
	}
	if _, err := c.Admit("t2", 1); err != nil {
		t.Fatalf("another team shares the bucket: %v", err)
	}
	time.Sleep(ae.RetryAfter + 20*time.Millisecond)
	if _, err := c.Admit("t1", 1); err != nil {
		t.Fatalf("after RetryAfter: %v", err)
	}
}

// TestCapsDoNotTakeTokens: a create refused by a cap leaves the bucket alone.
func TestCapsDoNotTakeTokens(t *testing.T) {
	c := New(Limits{TeamSandboxes: 1, CreateRate: 0.001, CreateBurst: 1})
	tk, err := c.Admit("t1", 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Admit("t1", 1)
	refused(t, err, "live sandboxes")
	tk.Release()
	_, err = c.Admit("t1", 1)
	refused(t, err, "faster than the limit") // the one token went to the first create
}

func TestConcurrentAdmitsNeverOvershoot(t *testing.T) {
	c := New(Limits{TeamSandboxes: 10, ServerMemoryMB: 1 << 20})
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 50 {
		wg.Go(func() {
			if _, err := c.Admit("t1", 64); err == nil {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n, mb, _ := c.Usage("t1"); admitted != 10 || n != 10 || mb != 640 {
		t.Fatalf("admitted %d, usage %d sandboxes %d MiB", admitted, n, mb)
	}
}

func TestDefaultServerMemory(t *testing.T) {
	if got := DefaultServerMemoryMB(24 << 30); got != 24*1024*Overcommit {
		t.Fatalf("24 GiB host: %d MiB", got)
	}
}

func BenchmarkAdmitRelease(b *testing.B) {
	c := New(Limits{TeamSandboxes: 1000, ServerMemoryMB: 1 << 30, CreateRate: 1e9, CreateBurst: 1 << 30})
	for b.Loop() {
		tk, err := c.Admit("t1", 512)
		if err != nil {
			b.Fatal(err)
		}
		tk.Release()
	}
}
