package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cubby-dev/cubby/internal/agentclient"
	"github.com/cubby-dev/cubby/internal/backend"
)

// Create implements backend.Backend: it creates the sandbox's Pod (and, for
// an egress policy, its own NetworkPolicy: see SetEgress), waits until
// it runs and its agent's readiness probe passes (at most PendingTimeout: a
// Pod still pending then, or failing, is deleted and the create fails with the
// cluster's reason), then sends the agent req.Init. On error no Pod is left.
// Errors wrap backend.ErrInvalid for what the cluster rejects (an unknown
// RuntimeClass, an invalid spec) and backend.ErrUnavailable when the API
// cannot be reached, backend.ErrNotSupported for egress the cluster cannot
// enforce (checkEgress).
func (b *Backend) Create(ctx context.Context, req backend.CreateRequest) (in backend.Instance, err error) {
	if err := checkCreate(req); err != nil {
		return backend.Instance{}, err
	}
	if !req.Egress.IsZero() {
		if err := checkEgress(req.Egress); err != nil {
			return backend.Instance{}, err
		}
	}
	pod, err := b.podFor(req, StateClaimed)
	if err != nil {
		return backend.Instance{}, err
	}
	created, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return backend.Instance{}, fmt.Errorf("create pod %s: %w", pod.Name, apiError(err))
	}
	defer func() {
		if err != nil {
			b.deletePod(context.WithoutCancel(ctx), pod.Name, "")
			_ = b.deleteEgressPolicy(context.WithoutCancel(ctx), req.SandboxID)
		}
	}()
	if !req.Egress.IsZero() {
		if err := b.putEgressPolicy(ctx, b.egressPolicy(req.SandboxID, req.Egress, created)); err != nil {
			return backend.Instance{}, err
		}
	}
	addr, err := b.waitReady(ctx, pod.Name)
	if err != nil {
		return backend.Instance{}, err
	}
	readyCtx, cancel := context.WithTimeout(ctx, b.cfg.PendingTimeout)
	defer cancel()
	c := b.agent(addr, "")
	if err := c.WaitHealthy(readyCtx, 5*time.Millisecond); err != nil {
		return backend.Instance{}, fmt.Errorf("sandbox %s: %w", req.SandboxID, err)
	}
	init := req.Init
	init.Timestamp = time.Now().UTC()
	if err := c.Init(readyCtx, init); err != nil {
		return backend.Instance{}, fmt.Errorf("init agent of %s: %w", req.SandboxID, err)
	}
	return backend.Instance{SandboxID: req.SandboxID, Addr: addr, Runtime: req.Runtime, StartedAt: time.Now().UTC()}, nil
}

// agent returns a client of the agent at addr.
func (b *Backend) agent(addr netip.Addr, token string) *agentclient.Client {
	return agentclient.New(addr, "", token)
}

// waitReady waits until Pod name runs with an IP and passes its readiness
// probe, and returns the IP. It fails when the Pod fails, is deleted, stays
// pending past PendingTimeout, or cannot start its container for a reason
// waiting cannot cure.
func (b *Backend) waitReady(ctx context.Context, name string) (netip.Addr, error) {
	deadline := time.NewTimer(b.cfg.PendingTimeout)
	defer deadline.Stop()
	for {
		changed := b.changes()
		pod, err := b.pods.Get(name)
		switch {
		case apierrors.IsNotFound(err):
			// not in the cache yet, or deleted meanwhile: wait for the informer
		case err != nil:
			return netip.Addr{}, fmt.Errorf("pod %s: %w", name, err)
		default:
			addr, done, err := readiness(pod)
			if done || err != nil {
				return addr, err
			}
		}
		select {
		case <-ctx.Done():
			return netip.Addr{}, fmt.Errorf("pod %s: %w", name, ctx.Err())
		case <-deadline.C:
			return netip.Addr{}, fmt.Errorf("pod %s not running after %s: %s", name, b.cfg.PendingTimeout, pendingReason(pod))
		case <-changed:
		}
	}
}

// readiness reports whether pod is ready (with its IP) or can never be (err).
func readiness(pod *corev1.Pod) (netip.Addr, bool, error) {
	if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		return netip.Addr{}, false, fmt.Errorf("pod %s ended before it was ready: %s", pod.Name, goneReason(pod))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && hopeless(w.Reason) {
			return netip.Addr{}, false, fmt.Errorf("pod %s cannot start: %s: %s: %w", pod.Name, w.Reason, w.Message, backend.ErrInvalid)
		}
	}
	if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || !podReady(pod) {
		return netip.Addr{}, false, nil
	}
	addr, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return netip.Addr{}, false, fmt.Errorf("pod %s IP %q: %w", pod.Name, pod.Status.PodIP, err)
	}
	return addr, true, nil
}

// hopeless reports container waiting reasons no retry by the kubelet cures.
func hopeless(reason string) bool {
	switch reason {
	case "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
		return true
	}
	return false
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pendingReason says why a Pod is not running: the scheduler's condition, a
// container's waiting reason, or its phase.
func pendingReason(pod *corev1.Pod) string {
	if pod == nil {
		return "the pod never appeared"
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return w.Reason + ": " + w.Message
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			return string(c.Type) + ": " + c.Message
		}
	}
	return "phase " + string(pod.Status.Phase)
}

// apiError classifies an error of the Kubernetes API: what admission or
// validation rejects wraps backend.ErrInvalid (answered 400), an API that
// cannot be reached or is overloaded wraps backend.ErrUnavailable (503).
func apiError(err error) error {
	switch {
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
		apierrors.IsForbidden(err) && strings.Contains(err.Error(), "RuntimeClass"):
		return fmt.Errorf("%w: %w", backend.ErrInvalid, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("the cluster refused the sandbox pod: %w: %w", backend.ErrInvalid, err)
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsServiceUnavailable(err),
		apierrors.IsTooManyRequests(err), apierrors.IsInternalError(err), isConnError(err):
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	return err
}

// isConnError reports a failure to reach the API at all (no HTTP status).
func isConnError(err error) bool {
	var status apierrors.APIStatus
	return !errors.As(err, &status) && !errors.Is(err, context.Canceled)
}

// deletePod deletes Pod name at once (grace 0); uid, when set, is a
// precondition. A Pod already gone is not an error.
func (b *Backend) deletePod(ctx context.Context, name, uid string) {
	grace := int64(0)
	opts := metav1.DeleteOptions{GracePeriodSeconds: &grace}
	if uid != "" {
		opts.Preconditions = metav1.NewUIDPreconditions(uid)
	}
	err := b.client.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		b.log.Warn("delete sandbox pod", "pod", name, "err", err)
	}
}
