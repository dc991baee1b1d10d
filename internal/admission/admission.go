// Package admission decides whether a team may start another sandbox (a cold
// create or a warm-pool claim alike): per-team caps on live sandboxes and on
// the sum of their memory limits, a server-wide cap on that sum, and a
// token-bucket rate limit on each team's creates. A refusal is an *Error,
// which the control plane answers with 429 in E2B's error shape.
//
// Memory is counted as the sandboxes' memory limits (MiB), not their use: a
// limit is what a sandbox may take from the host at any moment.
package admission

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of the serve flags (README's flag table).
const (
	// DefaultTeamSandboxes is the default cap on one team's live sandboxes.
	DefaultTeamSandboxes = 100
	// DefaultCreateRate is the default sustained creates per second of one team.
	DefaultCreateRate = 10
	// DefaultCreateBurst is the default number of creates a team may make at
	// once after being idle.
	DefaultCreateBurst = 20
	// Overcommit is how many times the host's RAM the memory limits of all live
	// sandboxes may add up to by default (ServerMemoryMB): a limit is a cap, and
	// an idle code-interpreter sandbox uses about a quarter of the default 1 GiB.
	Overcommit = 4
)

// DefaultServerMemoryMB is the default server-wide cap, in MiB, for a host
// with hostBytes of RAM: Overcommit times it.
func DefaultServerMemoryMB(hostBytes uint64) int {
	return int(min(hostBytes>>20*Overcommit, math.MaxInt32))
}

// Limits are the admission limits. A zero field is no limit.
type Limits struct {
	// TeamSandboxes caps the live (running or paused) sandboxes of one team.
	TeamSandboxes int
	// TeamMemoryMB caps the summed memory limits (MiB) of one team's live sandboxes.
	TeamMemoryMB int
	// ServerMemoryMB caps the summed memory limits (MiB) of all live sandboxes.
	ServerMemoryMB int
	// CreateRate is the sustained creates per second allowed to one team.
	CreateRate float64
	// CreateBurst is the bucket size of CreateRate; values below 1 mean 1.
	CreateBurst int
}

// Error is a refused admission: the caller should retry later (E2B answers 429).
type Error struct {
	// Message says which limit was hit, with the figures.
	Message string
	// RetryAfter is when a rate-limited create may succeed; 0 for the caps,
	// which free up only when a sandbox ends.
	RetryAfter time.Duration
}

// Error implements error.
func (e *Error) Error() string { return e.Message }

// Controller admits sandboxes and tracks what is admitted. It is safe for
// concurrent use.
type Controller struct {
	limits Limits

	mu       sync.Mutex
	teams    map[string]*usage
	serverMB int
}

// usage is one team's admitted sandboxes and its create bucket.
type usage struct {
	sandboxes int
	memoryMB  int
	bucket    *rate.Limiter // nil without a rate limit
}

// New returns a Controller enforcing l.
func New(l Limits) *Controller {
	return &Controller{limits: l, teams: map[string]*usage{}}
}

// Ticket is one admitted sandbox; Release it when the sandbox is gone or its
// create failed. Release is idempotent.
type Ticket struct {
	c        *Controller
	team     string
	memoryMB int
	once     sync.Once
}

// Release returns the ticket's sandbox and memory to its team and the server.
// A nil ticket is a no-op.
func (t *Ticket) Release() {
	if t == nil {
		return
	}
	t.once.Do(func() {
		c := t.c
		c.mu.Lock()
		defer c.mu.Unlock()
		u := c.team(t.team)
		u.sandboxes--
		u.memoryMB -= t.memoryMB
		c.serverMB -= t.memoryMB
	})
}

// Admit admits one more sandbox with memoryMB of memory limit for team: it
// checks the caps, then takes a token from the team's create bucket. Errors:
// *Error naming the cap hit, or the rate limit with RetryAfter set; nothing is
// counted (nor a token taken) on an error.
func (c *Controller) Admit(team string, memoryMB int) (*Ticket, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.team(team)
	if err := c.checkCaps(team, u, memoryMB); err != nil {
		return nil, err
	}
	if u.bucket != nil {
		now := time.Now()
		r := u.bucket.ReserveN(now, 1)
		if delay := r.DelayFrom(now); delay > 0 {
			r.CancelAt(now)
			return nil, &Error{RetryAfter: delay, Message: fmt.Sprintf(
				"team %q creates sandboxes faster than the limit of %g per second (burst %d): retry in %s",
				team, c.limits.CreateRate, u.bucket.Burst(), delay.Round(time.Millisecond))}
		}
	}
	return c.hold(team, u, memoryMB), nil
}

// checkCaps refuses a sandbox of memoryMB that would exceed a cap; c.mu is held.
func (c *Controller) checkCaps(team string, u *usage, memoryMB int) error {
	l := c.limits
	switch {
	case l.TeamSandboxes > 0 && u.sandboxes+1 > l.TeamSandboxes:
		return &Error{Message: fmt.Sprintf("team %q has reached its limit of %d live sandboxes: kill one first", team, l.TeamSandboxes)}
	case l.TeamMemoryMB > 0 && u.memoryMB+memoryMB > l.TeamMemoryMB:
		return &Error{Message: fmt.Sprintf("team %q has reached its memory limit: its live sandboxes hold %d of %d MiB and a new one needs %d MiB",
			team, u.memoryMB, l.TeamMemoryMB, memoryMB)}
	case l.ServerMemoryMB > 0 && c.serverMB+memoryMB > l.ServerMemoryMB:
		return &Error{Message: fmt.Sprintf("the server is at capacity: live sandboxes hold %d of %d MiB of memory and a new one needs %d MiB",
			c.serverMB, l.ServerMemoryMB, memoryMB)}
	}
	return nil
}

// Hold counts a sandbox that exists already (re-adopted after a restart)
// without checking any limit, and returns its ticket.
func (c *Controller) Hold(team string, memoryMB int) *Ticket {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hold(team, c.team(team), memoryMB)
}

func (c *Controller) hold(team string, u *usage, memoryMB int) *Ticket {
	u.sandboxes++
	u.memoryMB += memoryMB
	c.serverMB += memoryMB
	return &Ticket{c: c, team: team, memoryMB: memoryMB}
}

// Usage returns a team's admitted live sandboxes and their summed memory
// limits (MiB), and the server-wide sum.
func (c *Controller) Usage(team string) (sandboxes, memoryMB, serverMB int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.team(team)
	return u.sandboxes, u.memoryMB, c.serverMB
}

// team returns team's usage, creating it; c.mu is held. Teams come from
// authenticated API keys, so the map is bounded by the teams in the store.
func (c *Controller) team(team string) *usage {
	u, ok := c.teams[team]
	if !ok {
		u = &usage{}
		if c.limits.CreateRate > 0 {
			u.bucket = rate.NewLimiter(rate.Limit(c.limits.CreateRate), max(c.limits.CreateBurst, 1))
		}
		c.teams[team] = u
	}
	return u
}
