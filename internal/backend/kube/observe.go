package kube

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cubby-dev/cubby/internal/backend"
)

// tombRetention is how long the reason of a gone sandbox is remembered for Lookup.
const tombRetention = 10 * time.Minute

// podSummary is what events are derived from: a claimed Pod's reachability,
// deadline and end.
type podSummary struct {
	up       bool       // running with an IP
	addr     netip.Addr // the Pod IP when up
	deadline string     // AnnDeadline
	gone     bool       // deleted, being deleted, failed or succeeded
	reason   string     // why, when gone
}

// tomb remembers why a sandbox went.
type tomb struct {
	reason string
	at     time.Time
}

// summarize reduces a sandbox Pod to a podSummary; deleted means the informer
// reported its deletion.
func summarize(pod *corev1.Pod, deleted bool) podSummary {
	s := podSummary{deadline: pod.Annotations[AnnDeadline]}
	switch {
	case deleted || pod.DeletionTimestamp != nil:
		s.gone, s.reason = true, goneReason(pod)
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		s.gone, s.reason = true, goneReason(pod)
	case pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "":
		if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			s.up, s.addr = true, a
		}
	}
	return s
}

// goneReason explains why a sandbox Pod ended: the disruption the cluster
// recorded (eviction, node lost, preemption), the Pod's failure reason, or
// how the agent exited.
func goneReason(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue {
			return fmt.Sprintf("pod %s: %s", c.Reason, c.Message)
		}
	}
	if pod.Status.Reason != "" {
		return fmt.Sprintf("pod %s: %s", pod.Status.Reason, pod.Status.Message)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil {
			return fmt.Sprintf("agent exited: %s (exit code %d)", t.Reason, t.ExitCode)
		}
	}
	return "pod deleted"
}

// podOf returns the Pod of an informer notification (also of a tombstone).
func podOf(obj any) *corev1.Pod {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, _ := obj.(*corev1.Pod)
	return pod
}

// observe handles one informer notification: it wakes the creates waiting on
// Pods and turns changes of claimed Pods into events for subscribers.
func (b *Backend) observe(obj any, deleted bool) {
	pod := podOf(obj)
	if pod == nil {
		return
	}
	b.broadcast()
	id := pod.Labels[LabelID]
	if id == "" || pod.Labels[LabelState] != StateClaimed {
		return
	}
	now := summarize(pod, deleted)
	b.mu.Lock()
	evs := b.diff(id, now)
	subs := b.subs
	b.mu.Unlock()
	for _, ev := range evs {
		for _, fn := range subs {
			fn(ev)
		}
	}
	if now.gone && !deleted && pod.DeletionTimestamp == nil {
		b.reap(pod) // failed or succeeded: the Pod has nothing left to run
	}
}

// diff records now as id's latest summary and returns the events since the
// previous one; b.mu is held. Gone is reported only for a sandbox that was up
// (a create that fails earlier reports its own failure).
func (b *Backend) diff(id string, now podSummary) []backend.Event {
	prev, had := b.seen[id]
	if now.gone {
		delete(b.seen, id)
		if !had || !prev.up {
			return nil
		}
		b.bury(id, now.reason)
		return []backend.Event{{Kind: backend.EventGone, SandboxID: id, Reason: now.reason}}
	}
	if had && prev.up && !now.up {
		now.up, now.addr = prev.up, prev.addr // a Pod never goes back to pending
	}
	b.seen[id] = now
	var evs []backend.Event
	if now.up && !prev.up {
		evs = append(evs, backend.Event{Kind: backend.EventUp, SandboxID: id,
			Instance: backend.Instance{SandboxID: id, Addr: now.addr}})
	}
	if had && now.deadline != prev.deadline {
		if t, err := time.Parse(time.RFC3339Nano, now.deadline); err == nil {
			evs = append(evs, backend.Event{Kind: backend.EventDeadline, SandboxID: id, Deadline: t})
		}
	}
	return evs
}

// bury remembers why id went and forgets old reasons; b.mu is held.
func (b *Backend) bury(id, reason string) {
	now := time.Now()
	for k, t := range b.tombs {
		if now.Sub(t.at) > tombRetention {
			delete(b.tombs, k)
		}
	}
	b.tombs[id] = tomb{reason: reason, at: now}
}

// broadcast wakes every waiter on Pod changes.
func (b *Backend) broadcast() {
	b.mu.Lock()
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// changes returns a channel closed at the next Pod change.
func (b *Backend) changes() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// Subscribe implements the control plane's shared-backend contract: fn gets
// every Up, Deadline and Gone event of claimed sandbox Pods, from the
// informer's goroutine, until Close. fn must not block.
func (b *Backend) Subscribe(fn func(backend.Event)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs = append(b.subs, fn)
}

// reapTimeout bounds deleting one ended Pod.
const reapTimeout = 30 * time.Second

// reap deletes an ended sandbox Pod in the background (every replica may try;
// the UID precondition and NotFound make that harmless).
func (b *Backend) reap(pod *corev1.Pod) {
	name, uid := pod.Name, string(pod.UID)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), reapTimeout)
		defer cancel()
		b.deletePod(ctx, name, uid)
	}()
}

// waitCached waits until the informer cache holds pod at its resourceVersion
// (or a later one), so what this replica just wrote (a claim) is what its
// Lookup, Stats and Recover see. Errors: ctx ending, the Pod vanishing.
func (b *Backend) waitCached(ctx context.Context, pod *corev1.Pod) error {
	for {
		changed := b.changes()
		cached, err := b.pods.Get(pod.Name)
		switch {
		case err != nil:
			return fmt.Errorf("pod %s after update: %w", pod.Name, err)
		case cached.UID != pod.UID:
			return fmt.Errorf("pod %s was replaced", pod.Name)
		case cached.ResourceVersion == pod.ResourceVersion || newerRV(cached.ResourceVersion, pod.ResourceVersion):
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pod %s after update: %w", pod.Name, ctx.Err())
		case <-changed:
		}
	}
}

// newerRV reports whether resourceVersion a is later than b. Versions are
// opaque to clients in general; this API server's are etcd revisions
// (decimal integers), compared as such, and anything else counts as not newer.
func newerRV(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}
