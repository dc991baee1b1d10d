// Package pool keeps warm sandboxes: for each configured template, a number of
// fully booted sandboxes (agent up, default code contexts live) wait for a
// create request. A create that matches one claims it, which costs one agent
// /init (env vars, access token) instead of a boot, and a background loop boots
// a replacement.
//
// Pooled sandboxes exist only in the backend: the control plane has no record of
// them until they are claimed, so they are absent from lists, unreachable
// through the gateway and never subject to a timeout. Nothing has run in them,
// so a claimed sandbox is indistinguishable from a cold one. After a restart of
// the server the backend's recovery sweeps them like any unknown sandbox.
//
// The pool's memory is bounded by a budget (bytes, measured from each pooled
// sandbox's memory cgroup) and by the host's available memory.
package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/agentclient"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/meminfo"
	"github.com/cubby-dev/cubby/internal/telemetry"
)

// Target asks for Size warm sandboxes of Template (a name, alias or ID).
type Target struct {
	Template string
	Size     int
}

// Backend is what a Pool needs of the backend that runs its sandboxes: boot,
// measure and kill warm sandboxes, and configure one for the create request
// that claims it. backend.Backend satisfies it; each method has the contract
// (and the errors) of the backend.Backend method of the same name.
type Backend interface {
	// Create boots a warm sandbox; on error nothing is left behind.
	Create(ctx context.Context, req backend.CreateRequest) (backend.Instance, error)
	// Kill stops a warm sandbox and frees what it held; unknown IDs return nil.
	Kill(ctx context.Context, id string) error
	// Stats samples a sandbox's resource use (the pool reads MemUsed, bytes).
	Stats(ctx context.Context, id string) (backend.Stats, error)
	// Reinit sends the claiming request's init (env vars, access token) to
	// the sandbox's agent.
	Reinit(ctx context.Context, id string, init agentapi.InitRequest) error
	// SetInternetAccess blocks (allowed = false) traffic from the sandbox to
	// anything outside the host.
	SetInternetAccess(ctx context.Context, id string, allowed bool) error
	// SetEgress applies the claiming request's egress policy.
	SetEgress(ctx context.Context, id string, p *policy.Policy) error
}

// Config configures a Pool. Backend, Resolve and NewID are required.
type Config struct {
	Backend Backend
	Targets []Target
	// Resolve returns the create request a pooled sandbox of template is booted
	// with (SandboxID is set by the pool; Init carries the sandbox defaults and
	// no token). It is called on every refill round, so a rebuilt template
	// replaces the sandboxes booted from its previous rootfs.
	Resolve func(ctx context.Context, template string) (backend.CreateRequest, error)
	// NewID returns a fresh sandbox ID ([a-z0-9]{20}).
	NewID func() string
	// MemoryBudget caps the memory (bytes, memory cgroup usage) held by pooled
	// sandboxes; 0 = a quarter of the host's RAM.
	MemoryBudget uint64
	// HostReserve is the host memory (bytes, MemAvailable) a boot must leave
	// free; 0 = 1 GiB.
	HostReserve uint64
	// Ready waits until a booted sandbox is fully up; nil = poll its agent's
	// GET /ready (agentclient.Client.WaitReady).
	Ready func(ctx context.Context, in backend.Instance) error
	// ReadyTimeout bounds one pooled boot up to Ready; 0 = 2 min.
	ReadyTimeout time.Duration
	// Interval is the refill loop's period when nothing wakes it; 0 = 2 s.
	Interval time.Duration
	// Quiet is how long after the last claim boots wait, so that a burst of
	// creates and the first code they run do not share the CPU with boots; 0 =
	// 1 s, negative = none. Boots start at the latest Interval after the first
	// claim of a burst.
	Quiet   time.Duration
	Log     *slog.Logger
	Metrics *telemetry.Metrics // nil = no metrics
}

// key is what must match between a pooled sandbox and a create request.
type key struct {
	TemplateID, RootfsDir, Runtime string
	CPUCount, MemoryMB, DiskSizeMB int
	Boot                           string // BootOptions.Key
}

func keyOf(r backend.CreateRequest) key {
	return key{r.TemplateID, r.RootfsDir, r.Runtime, r.CPUCount, r.MemoryMB, r.DiskSizeMB, r.Boot.Key()}
}

// member is one warm sandbox.
type member struct {
	in  backend.Instance
	key key
	mem uint64 // bytes charged to its memory cgroup at the last refill round
}

// Pool is a set of warm sandboxes. Create it with New, run its refill loop
// with Run, and claim from it with Claim. Methods are safe for concurrent use.
type Pool struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	ready    map[key][]*member // oldest first
	booting  map[key]int
	wanted   map[key]int    // size per key, from the last refill round
	memEst   map[key]uint64 // bytes one pooled sandbox of key uses once ready
	wake     chan struct{}
	claimed  time.Time // last claim
	failures map[key]failure
}

// failure is the retry state of a key whose boots fail.
type failure struct {
	n     int           // consecutive failed boots
	wait  time.Duration // current delay
	until time.Time     // no boot before
}

// New returns a Pool for cfg; nothing boots until Run.
func New(cfg Config) *Pool {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Ready == nil {
		cfg.Ready = func(ctx context.Context, in backend.Instance) error {
			return agentclient.New(in.Addr, in.HostIface, "").WaitReady(ctx, 10*time.Millisecond)
		}
	}
	if cfg.Quiet == 0 {
		cfg.Quiet = time.Second
	}
	if cfg.HostReserve == 0 {
		cfg.HostReserve = 1 << 30
	}
	if cfg.MemoryBudget == 0 {
		if m, err := meminfo.Read(); err == nil {
			cfg.MemoryBudget = m.Total / 4
		}
	}
	return &Pool{cfg: cfg, log: cfg.Log, ready: map[key][]*member{}, booting: map[key]int{},
		wanted: map[key]int{}, memEst: map[key]uint64{}, wake: make(chan struct{}, 1), failures: map[key]failure{}}
}

// Claim hands a warm sandbox matching req to a create request: it blocks its
// internet access when req.NoInternet, applies req.Egress, sends req.Init to its agent (env vars,
// access token) and returns the instance, whose SandboxID replaces the one req
// carried. ok is false when no warm sandbox matches (the caller then creates
// one cold); a sandbox that fails either step is killed and the next one is
// tried.
func (p *Pool) Claim(ctx context.Context, req backend.CreateRequest) (in backend.Instance, ok bool) {
	k := keyOf(req)
	defer p.signal()
	for {
		m := p.take(k)
		if m == nil {
			if p.pooled(k) {
				p.cfg.Metrics.PoolClaim(k.TemplateID, telemetry.ClaimMiss)
			}
			return backend.Instance{}, false
		}
		p.mu.Lock()
		p.claimed = time.Now()
		p.mu.Unlock()
		err := p.configure(ctx, m.in.SandboxID, req)
		if err == nil {
			p.cfg.Metrics.PoolClaim(k.TemplateID, telemetry.ClaimHit)
			p.log.Info("warm sandbox claimed", "sandbox", m.in.SandboxID, "template", k.TemplateID)
			return m.in, true
		}
		p.log.Warn("warm sandbox failed its init; discarding it", "sandbox", m.in.SandboxID, "err", err)
		p.kill(context.WithoutCancel(ctx), m.in.SandboxID)
		if ctx.Err() != nil {
			return backend.Instance{}, false
		}
	}
}

// configure applies a create request's network restriction and init to a
// warm sandbox, network first so nothing runs unrestricted after the claim.
func (p *Pool) configure(ctx context.Context, id string, req backend.CreateRequest) error {
	if req.NoInternet {
		if err := p.cfg.Backend.SetInternetAccess(ctx, id, false); err != nil {
			return err
		}
	}
	if req.Egress != nil {
		if err := p.cfg.Backend.SetEgress(ctx, id, req.Egress); err != nil {
			return err
		}
	}
	return p.cfg.Backend.Reinit(ctx, id, req.Init)
}

// take removes and returns the oldest ready member of k, or nil.
func (p *Pool) take(k key) *member {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.ready[k]
	if len(list) == 0 {
		return nil
	}
	m := list[0]
	p.ready[k] = list[1:]
	p.publish(k)
	return m
}

// pooled reports whether k is a configured pool (a miss worth counting).
func (p *Pool) pooled(k key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wanted[k] > 0
}

func (p *Pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run refills the pool until ctx ends, then kills every warm sandbox and
// returns. Boots run one at a time, so refilling takes at most one boot's worth
// of CPU away from running sandboxes.
func (p *Pool) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		p.refill(ctx)
		select {
		case <-ctx.Done():
			p.drain(context.WithoutCancel(ctx))
			return
		case <-p.wake:
		case <-t.C:
		}
		p.waitQuiet(ctx)
	}
}

// waitQuiet returns once no claim happened for Config.Quiet, after at most
// Config.Interval, or when ctx ends.
func (p *Pool) waitQuiet(ctx context.Context) {
	if p.cfg.Quiet < 0 {
		return
	}
	deadline := time.Now().Add(p.cfg.Interval)
	for {
		p.mu.Lock()
		wait := time.Until(p.claimed.Add(p.cfg.Quiet))
		p.mu.Unlock()
		wait = min(wait, time.Until(deadline))
		if wait <= 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// refill runs one round: resolve every target, discard sandboxes booted from a
// rootfs no target uses any more, refresh memory figures, then boot until every
// target is full or the budget is reached.
func (p *Pool) refill(ctx context.Context) {
	wanted := map[key]int{}
	reqs := map[key]backend.CreateRequest{}
	for _, t := range p.cfg.Targets {
		req, err := p.cfg.Resolve(ctx, t.Template)
		if err != nil {
			p.log.Debug("pool target not available", "template", t.Template, "err", err)
			continue
		}
		k := keyOf(req)
		wanted[k] += t.Size
		reqs[k] = req
	}
	p.mu.Lock()
	p.wanted = wanted
	p.mu.Unlock()
	for k, n := range wanted {
		p.cfg.Metrics.PoolTarget(k.TemplateID, n)
	}
	p.discardStale(ctx, wanted)
	p.measure(ctx)
	for ctx.Err() == nil {
		k, ok := p.nextBoot(wanted)
		if !ok {
			return
		}
		if err := p.boot(ctx, k, reqs[k]); err != nil {
			if ctx.Err() == nil {
				wait := p.backoff(k)
				p.log.Warn("warm sandbox boot failed", "template", k.TemplateID, "retry_in", wait, "err", err)
			}
			continue // other targets may still boot
		}
		p.mu.Lock()
		delete(p.failures, k)
		p.mu.Unlock()
	}
}

// Boot retry delays after consecutive failures of one key: 2 s doubling up to 5 min.
const (
	retryMin = 2 * time.Second
	retryMax = 5 * time.Minute
)

// backoff records a failed boot of k and returns how long k now waits.
func (p *Pool) backoff(k key) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.failures[k]
	f.n++
	f.wait = min(retryMin<<min(f.n-1, 20), retryMax)
	f.until = time.Now().Add(f.wait)
	p.failures[k] = f
	return f.wait
}

// nextBoot picks the target furthest below its size that the memory budget and
// the host's available memory allow one more boot of.
func (p *Pool) nextBoot(wanted map[key]int) (key, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best key
	bestGap := 0
	for k, n := range wanted {
		if time.Now().Before(p.failures[k].until) {
			continue // backing off after failed boots
		}
		if gap := n - len(p.ready[k]) - p.booting[k]; gap > bestGap {
			best, bestGap = k, gap
		}
	}
	if bestGap == 0 {
		return key{}, false
	}
	est := p.estimate(best)
	if used := p.usedLocked(); used+est > p.cfg.MemoryBudget {
		p.log.Debug("pool at its memory budget", "used", used, "budget", p.cfg.MemoryBudget)
		return key{}, false
	}
	if m, err := meminfo.Read(); err == nil && m.Available < est+p.cfg.HostReserve {
		p.log.Debug("host memory too low to grow the pool", "available", m.Available)
		return key{}, false
	}
	return best, true
}

// estimate is the memory one more sandbox of k is expected to take: the largest
// figure measured for k, else its memory limit.
func (p *Pool) estimate(k key) uint64 {
	if e := p.memEst[k]; e > 0 {
		return e
	}
	return uint64(k.MemoryMB) << 20
}

// usedLocked is the memory held by ready members plus the estimate of those
// booting; the caller holds p.mu.
func (p *Pool) usedLocked() uint64 {
	var used uint64
	for _, list := range p.ready {
		for _, m := range list {
			used += m.mem
		}
	}
	for k, n := range p.booting {
		used += uint64(n) * p.estimate(k)
	}
	return used
}

// boot creates one pooled sandbox for k and waits until its agent reports the
// default code contexts live.
func (p *Pool) boot(ctx context.Context, k key, req backend.CreateRequest) error {
	p.mu.Lock()
	p.booting[k]++
	p.publish(k)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.booting[k]--
		p.publish(k)
		p.mu.Unlock()
	}()
	bctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyTimeout)
	defer cancel()
	req.SandboxID = p.cfg.NewID()
	in, err := p.cfg.Backend.Create(bctx, req)
	if err != nil {
		return fmt.Errorf("create pooled sandbox: %w", err)
	}
	if err := p.cfg.Ready(bctx, in); err != nil {
		p.kill(context.WithoutCancel(ctx), in.SandboxID)
		return fmt.Errorf("pooled sandbox %s: %w", in.SandboxID, err)
	}
	m := &member{in: in, key: k}
	if st, err := p.cfg.Backend.Stats(bctx, in.SandboxID); err == nil {
		m.mem = st.MemUsed
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ready[k] = append(p.ready[k], m)
	p.memEst[k] = max(p.memEst[k], m.mem)
	p.log.Debug("warm sandbox ready", "sandbox", in.SandboxID, "template", k.TemplateID, "mem", m.mem)
	return nil
}

// measure refreshes the memory figure of every ready member and drops members
// the backend no longer runs (their init exited on its own).
func (p *Pool) measure(ctx context.Context) {
	for _, m := range p.snapshot() {
		st, err := p.cfg.Backend.Stats(ctx, m.in.SandboxID)
		switch {
		case errors.Is(err, backend.ErrNotFound):
			p.remove(m)
			p.log.Warn("warm sandbox vanished; replacing it", "sandbox", m.in.SandboxID)
		case err == nil:
			p.mu.Lock()
			m.mem = st.MemUsed
			p.memEst[m.key] = max(p.memEst[m.key], st.MemUsed)
			p.mu.Unlock()
		}
	}
}

// discardStale kills ready members whose key no target asks for any more (the
// template was rebuilt, or the server's sandbox defaults changed) or that
// exceed their target's size.
func (p *Pool) discardStale(ctx context.Context, wanted map[key]int) {
	var stale []*member
	p.mu.Lock()
	for k, list := range p.ready {
		if n := wanted[k]; len(list) > n {
			stale = append(stale, list[n:]...)
			p.ready[k] = list[:n]
			p.publish(k)
		}
	}
	p.mu.Unlock()
	for _, m := range stale {
		p.log.Info("discarding warm sandbox no target needs", "sandbox", m.in.SandboxID, "template", m.key.TemplateID)
		p.kill(ctx, m.in.SandboxID)
	}
}

func (p *Pool) snapshot() []*member {
	p.mu.Lock()
	defer p.mu.Unlock()
	var all []*member
	for _, list := range p.ready {
		all = append(all, list...)
	}
	return all
}

func (p *Pool) remove(m *member) {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.ready[m.key]
	for i, x := range list {
		if x == m {
			p.ready[m.key] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	p.publish(m.key)
}

// drain kills every ready member, concurrently (the server is stopping).
func (p *Pool) drain(ctx context.Context) {
	var wg sync.WaitGroup
	for _, m := range p.snapshot() {
		p.remove(m)
		wg.Go(func() { p.kill(ctx, m.in.SandboxID) })
	}
	wg.Wait()
}

func (p *Pool) kill(ctx context.Context, id string) {
	kctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.cfg.Backend.Kill(kctx, id); err != nil {
		p.log.Error("kill warm sandbox", "sandbox", id, "err", err)
	}
}

// publish updates the pool gauges of k; the caller holds p.mu.
func (p *Pool) publish(k key) {
	p.cfg.Metrics.PoolSize(k.TemplateID, len(p.ready[k]), p.booting[k])
}

// Stats is a snapshot of the pool for one template ID.
type Stats struct {
	Ready, Booting int
	MemoryBytes    uint64 // memory cgroup usage of the ready sandboxes at the last refill round
}

// Stats returns the pool's figures per template ID.
func (p *Pool) Stats() map[string]Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]Stats{}
	for k, list := range p.ready {
		s := out[k.TemplateID]
		s.Ready += len(list)
		for _, m := range list {
			s.MemoryBytes += m.mem
		}
		out[k.TemplateID] = s
	}
	for k, n := range p.booting {
		s := out[k.TemplateID]
		s.Booting += n
		out[k.TemplateID] = s
	}
	return out
}

// ParseTarget parses "TEMPLATE=N" (e.g. "code-interpreter=20"), N ≥ 0.
// Errors: a missing "=", an empty template, or a bad or negative size.
func ParseTarget(s string) (Target, error) {
	name, n, ok := strings.Cut(s, "=")
	if !ok || strings.TrimSpace(name) == "" {
		return Target{}, fmt.Errorf("pool %q: want TEMPLATE=SIZE", s)
	}
	size, err := strconv.Atoi(strings.TrimSpace(n))
	if err != nil || size < 0 {
		return Target{}, fmt.Errorf("pool %q: size must be a non-negative integer", s)
	}
	return Target{Template: strings.TrimSpace(name), Size: size}, nil
}
