package kube

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/pool"
	"github.com/cubby-dev/cubby/internal/telemetry"
)

// PoolConfig configures a Pool. Resolve and NewID are required.
type PoolConfig struct {
	Targets []pool.Target
	// Resolve returns the create request a warm Pod of template boots with
	// (SandboxID is set by the pool; Init carries no token).
	Resolve func(ctx context.Context, template string) (backend.CreateRequest, error)
	// NewID returns a fresh sandbox ID.
	NewID func() string
	// Interval is the refill period when nothing wakes the pool; default 1 s.
	Interval time.Duration
	Metrics  *telemetry.Metrics // nil = none
}

// Pool keeps warm sandbox Pods: per target, Size Pods labelled StateBooting
// while their agent starts its default code contexts, then StateWarm. Any
// replica claims one with a resourceVersion-preconditioned update to
// StateClaimed (a conflict means another replica took it: the next Pod is
// tried); only the leading replica runs Run, which refills. Warm Pods are not
// sandboxes: they have no record, no team and no events.
type Pool struct {
	b    *Backend
	cfg  PoolConfig
	log  *slog.Logger
	wake chan struct{}
}

// NewPool returns the warm pool of b.
func (b *Backend) NewPool(cfg PoolConfig) *Pool {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	return &Pool{b: b, cfg: cfg, log: b.log.With("component", "pool"), wake: make(chan struct{}, 1)}
}

// Claim implements the control plane's warm pool: it claims the oldest warm
// Pod matching req (image, runtime, limits, boot options), recording the
// claim (team, deadline, metadata, internet access) in the same update, then
// sends the agent req.Init. ok is false when no warm Pod matches or every
// candidate was taken by another replica first.
func (p *Pool) Claim(ctx context.Context, req backend.CreateRequest) (backend.Instance, bool) {
	image, ok := p.b.cfg.Images[req.TemplateID]
	if !ok || !req.Egress.IsZero() {
		return backend.Instance{}, false // an egress policy of its own: created cold
	}
	defer p.signal()
	key := poolKey(req, image, p.b.runtimeClass(req.Runtime))
	for _, pod := range p.candidates(key) {
		in, err := p.claim(ctx, pod, req)
		if err == nil {
			p.cfg.Metrics.PoolClaim(req.TemplateID, telemetry.ClaimHit)
			return in, true
		}
		if ctx.Err() != nil {
			break
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			p.log.Warn("warm pod claim failed; trying the next", "pod", pod.Name, "err", err)
		}
	}
	p.cfg.Metrics.PoolClaim(req.TemplateID, telemetry.ClaimMiss)
	return backend.Instance{}, false
}

// candidates returns the ready warm Pods of key, oldest first.
func (p *Pool) candidates(key string) []*corev1.Pod {
	pods, err := p.b.pods.List(labels.SelectorFromSet(labels.Set{LabelState: StateWarm, LabelPoolKey: key}))
	if err != nil {
		return nil
	}
	out := pods[:0]
	for _, pod := range pods {
		if _, ready, err := readiness(pod); ready && err == nil {
			out = append(out, pod)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreationTimestamp.Before(&out[j].CreationTimestamp) })
	return out
}

// claim takes pod for req: the update carries the cached resourceVersion, so
// of replicas racing for one Pod exactly one succeeds (the others get a
// conflict). A claimed Pod whose agent refuses the init is deleted.
func (p *Pool) claim(ctx context.Context, pod *corev1.Pod, req backend.CreateRequest) (backend.Instance, error) {
	claimed := pod.DeepCopy()
	if err := claimMeta(&claimed.ObjectMeta, req, p.b.cfg.Identity); err != nil {
		return backend.Instance{}, err
	}
	claimed.Annotations[AnnRuntime] = req.Runtime
	updated, err := p.b.client.CoreV1().Pods(p.b.cfg.Namespace).Update(ctx, claimed, metav1.UpdateOptions{})
	if err != nil {
		return backend.Instance{}, err
	}
	if err := p.b.waitCached(ctx, updated); err != nil {
		return backend.Instance{}, err
	}
	addr, _, _ := readiness(pod)
	init := req.Init
	init.Timestamp = time.Now().UTC()
	if err := p.b.agent(addr, "").Init(ctx, init); err != nil {
		p.b.deletePod(context.WithoutCancel(ctx), pod.Name, string(pod.UID))
		return backend.Instance{}, fmt.Errorf("init claimed pod %s: %w", pod.Name, err)
	}
	id := pod.Labels[LabelID]
	p.log.Info("warm pod claimed", "sandbox", id, "template", req.TemplateID)
	return backend.Instance{SandboxID: id, Addr: addr, Runtime: req.Runtime, StartedAt: time.Now().UTC()}, nil
}

func (p *Pool) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run refills the pool until ctx ends (run by the leading replica only). Warm
// Pods stay when it returns: the next leader takes them over.
func (p *Pool) Run(ctx context.Context) {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		p.refill(ctx)
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-t.C:
		}
	}
}

// refill runs one round: promote booted Pods to warm, delete failed, stale
// and stuck ones, and create Pods up to every target's size.
func (p *Pool) refill(ctx context.Context) {
	wanted, reqs := p.targets(ctx)
	have := map[string]int{}
	kept := map[string][]*corev1.Pod{}
	for _, pod := range p.members() {
		key := pod.Labels[LabelPoolKey]
		if p.discard(ctx, pod, wanted[key] > 0) {
			continue
		}
		have[key]++
		kept[key] = append(kept[key], pod)
		if pod.Labels[LabelState] == StateBooting {
			p.promote(ctx, pod)
		}
	}
	for key, pods := range kept {
		have[key] -= p.trim(ctx, pods, have[key]-wanted[key])
	}
	for key, n := range wanted {
		for i := have[key]; i < n && ctx.Err() == nil; i++ {
			req := reqs[key]
			req.SandboxID = p.cfg.NewID()
			if err := p.boot(ctx, req); err != nil {
				p.log.Warn("boot warm pod", "template", req.TemplateID, "err", err)
				break
			}
		}
	}
}

// targets resolves every target to its pool key, wanted size and request.
func (p *Pool) targets(ctx context.Context) (map[string]int, map[string]backend.CreateRequest) {
	wanted, reqs := map[string]int{}, map[string]backend.CreateRequest{}
	for _, t := range p.cfg.Targets {
		req, err := p.cfg.Resolve(ctx, t.Template)
		if err != nil {
			p.log.Debug("pool target not available", "template", t.Template, "err", err)
			continue
		}
		image, ok := p.b.cfg.Images[req.TemplateID]
		if !ok {
			continue
		}
		key := poolKey(req, image, p.b.runtimeClass(req.Runtime))
		wanted[key] += t.Size
		reqs[key] = req
	}
	return wanted, reqs
}

// members returns the booting and warm Pods.
func (p *Pool) members() []*corev1.Pod {
	req, _ := labels.NewRequirement(LabelState, selection.In, []string{StateBooting, StateWarm})
	pods, _ := p.b.pods.List(labels.NewSelector().Add(*req))
	return pods
}

// discard deletes a pool Pod that failed, is stale (no target wants its key)
// or did not get ready within PendingTimeout, and reports whether it is gone.
func (p *Pool) discard(ctx context.Context, pod *corev1.Pod, wanted bool) bool {
	if pod.DeletionTimestamp != nil {
		return true
	}
	_, ready, err := readiness(pod)
	stuck := !ready && time.Since(pod.CreationTimestamp.Time) > p.b.cfg.PendingTimeout
	if err == nil && wanted && !stuck {
		return false
	}
	p.log.Info("discarding warm pod", "pod", pod.Name, "wanted", wanted, "stuck", stuck, "err", err)
	p.b.deletePod(ctx, pod.Name, string(pod.UID))
	return true
}

// trim deletes n of pods (one key's pool, more than its target: a refill
// that ran before the cache showed its last boots, or a leader that booted
// just before it was replaced), booting ones first, then the newest, and
// returns how many it deleted. Each delete is preconditioned on the Pod's
// resourceVersion, so a Pod a replica claimed meanwhile is never deleted.
func (p *Pool) trim(ctx context.Context, pods []*corev1.Pod, n int) int {
	if n <= 0 {
		return 0
	}
	slices.SortFunc(pods, func(a, b *corev1.Pod) int {
		if ab, bb := a.Labels[LabelState] == StateBooting, b.Labels[LabelState] == StateBooting; ab != bb {
			if ab {
				return -1
			}
			return 1
		}
		return b.CreationTimestamp.Compare(a.CreationTimestamp.Time)
	})
	deleted := 0
	for _, pod := range pods[:min(n, len(pods))] {
		rv, grace := pod.ResourceVersion, int64(0)
		err := p.b.client.CoreV1().Pods(p.b.cfg.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &pod.UID, ResourceVersion: &rv}})
		if err == nil {
			p.log.Info("trimming warm pod beyond the target", "pod", pod.Name)
			deleted++
		} else if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			p.log.Warn("trim warm pod", "pod", pod.Name, "err", err)
		}
	}
	return deleted
}

// promote marks a booting Pod warm once its agent reports its default code
// contexts live (GET /ready; warm Pods have no access token yet).
func (p *Pool) promote(ctx context.Context, pod *corev1.Pod) {
	addr, ready, _ := readiness(pod)
	if !ready {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := p.b.agent(addr, "").WaitReady(rctx, time.Second); err != nil {
		return
	}
	warm := pod.DeepCopy()
	warm.Labels[LabelState] = StateWarm
	if _, err := p.b.client.CoreV1().Pods(p.b.cfg.Namespace).Update(ctx, warm, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		p.log.Warn("mark pod warm", "pod", pod.Name, "err", err)
	}
}

// boot creates one warm Pod for req.
func (p *Pool) boot(ctx context.Context, req backend.CreateRequest) error {
	pod, err := p.b.podFor(req, StateBooting)
	if err != nil {
		return err
	}
	if _, err := p.b.client.CoreV1().Pods(p.b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create pod %s: %w", pod.Name, apiError(err))
	}
	p.awaitCached(ctx, pod.Name)
	return nil
}

// cacheWait bounds how long a boot waits for the informer cache to show its
// Pod, so the next refill round counts it (trim corrects a round that did not).
const cacheWait = 5 * time.Second

// awaitCached waits (at most cacheWait) until the informer cache holds Pod name.
func (p *Pool) awaitCached(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(ctx, cacheWait)
	defer cancel()
	for {
		changed := p.b.changes()
		if _, err := p.b.pods.Get(name); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}
