package kube

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
)

// Kill implements backend.Backend: it deletes the sandbox's Pod at once
// (grace period 0) and its own egress NetworkPolicy. A Pod already gone is not an error; of replicas racing
// to kill one sandbox the store decides the answer, the deletes are idempotent.
func (b *Backend) Kill(ctx context.Context, id string) error {
	grace := int64(0)
	err := b.client.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, podName(id), metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", podName(id), apiError(err))
	}
	return b.deleteEgressPolicy(ctx, id)
}

// Lookup implements backend.Backend from the informer cache: the sandbox's
// Pod IP once its Pod runs. A Pod that ended (or went recently) answers a
// *backend.GoneError with the cluster's reason; an unknown, warm or pending
// one backend.ErrNotFound.
func (b *Backend) Lookup(_ context.Context, id string) (backend.Instance, error) {
	pod, err := b.pods.Get(podName(id))
	if apierrors.IsNotFound(err) {
		b.mu.Lock()
		t, ok := b.tombs[id]
		b.mu.Unlock()
		if ok {
			return backend.Instance{}, &backend.GoneError{SandboxID: id, Reason: t.reason}
		}
		return backend.Instance{}, fmt.Errorf("sandbox %s: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return backend.Instance{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	return instance(pod)
}

// instance is the backend.Instance of a claimed, running sandbox Pod.
func instance(pod *corev1.Pod) (backend.Instance, error) {
	id := pod.Labels[LabelID]
	if pod.Labels[LabelState] != StateClaimed {
		return backend.Instance{}, fmt.Errorf("sandbox %s: %w", id, backend.ErrNotFound)
	}
	s := summarize(pod, false)
	switch {
	case s.gone:
		return backend.Instance{}, &backend.GoneError{SandboxID: id, Reason: s.reason}
	case !s.up:
		return backend.Instance{}, fmt.Errorf("sandbox %s is not running yet: %w", id, backend.ErrNotFound)
	}
	in := backend.Instance{SandboxID: id, Addr: s.addr, Runtime: pod.Annotations[AnnRuntime]}
	if pod.Status.StartTime != nil {
		in.StartedAt = pod.Status.StartTime.UTC()
	}
	return in, nil
}

// Recover implements backend.Backend for one replica of several: it returns
// the running sandboxes among known and deletes claimed Pods no record knows
// once they are older than OrphanGrace (a replica died between claiming or
// creating one and recording it). Warm Pods belong to the pool and Pods of
// creates in flight are younger than the grace; both are left alone.
func (b *Backend) Recover(ctx context.Context, known []string) ([]backend.Instance, error) {
	pods, err := b.pods.List(claimedSelector())
	if err != nil {
		return nil, fmt.Errorf("list sandbox pods: %w", err)
	}
	want := make(map[string]bool, len(known))
	for _, id := range known {
		want[id] = true
	}
	var out []backend.Instance
	for _, pod := range pods {
		id := pod.Labels[LabelID]
		if want[id] {
			if in, err := instance(pod); err == nil {
				out = append(out, in)
			}
			continue
		}
		if claimedAt(pod).Before(time.Now().Add(-b.cfg.OrphanGrace)) {
			b.log.Warn("deleting a sandbox pod no record knows", "pod", pod.Name)
			b.deletePod(ctx, pod.Name, string(pod.UID))
		}
	}
	return out, nil
}

// claimedAt is when a Pod became a sandbox (its claim annotation, else its creation).
func claimedAt(pod *corev1.Pod) time.Time {
	if t, err := time.Parse(time.RFC3339Nano, pod.Annotations[AnnClaimedAt]); err == nil {
		return t
	}
	return pod.CreationTimestamp.Time
}

// Reinit implements backend.Backend: it posts init to the agent of a running
// sandbox. The backend does not hold sandboxes' access tokens, so this works
// for sandboxes without one (warm Pods); a secured agent refuses it.
func (b *Backend) Reinit(ctx context.Context, id string, init agentapi.InitRequest) error {
	in, err := b.Lookup(ctx, id)
	if err != nil {
		return err
	}
	if init.Timestamp.IsZero() {
		init.Timestamp = time.Now().UTC()
	}
	if err := b.agent(in.Addr, "").Init(ctx, init); err != nil {
		return fmt.Errorf("reinit agent of %s: %w", id, err)
	}
	return nil
}

// SetInternetAccess implements backend.Backend by relabelling the Pod: the
// internet NetworkPolicy selects sandboxes labelled LabelInternet=true.
func (b *Backend) SetInternetAccess(ctx context.Context, id string, allowed bool) error {
	return b.patch(ctx, id, map[string]any{"metadata": map[string]any{
		"labels": map[string]string{LabelInternet: boolLabel(allowed)}}})
}

// SetDeadline records a sandbox's deadline in its AnnDeadline annotation,
// where other replicas (and operators) see it.
func (b *Backend) SetDeadline(ctx context.Context, id string, deadline time.Time) error {
	return b.patch(ctx, id, map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{AnnDeadline: deadline.UTC().Format(time.RFC3339Nano)}}})
}

// patch applies a JSON merge patch to sandbox id's Pod.
func (b *Backend) patch(ctx context.Context, id string, p map[string]any) error {
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode patch: %w", err)
	}
	_, err = b.client.CoreV1().Pods(b.cfg.Namespace).Patch(ctx, podName(id), types.MergePatchType, body, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("sandbox %s: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("patch pod %s: %w", podName(id), apiError(err))
	}
	return nil
}

// Stats implements backend.Backend for sandboxes without an access token;
// see StatsWithToken.
func (b *Backend) Stats(ctx context.Context, id string) (backend.Stats, error) {
	return b.StatsWithToken(ctx, id, "")
}

// StatsWithToken samples a sandbox's resource use as its agent sees it from
// inside (GET /metrics: its cgroup and root filesystem), authenticated with
// the sandbox's access token. Errors: backend.ErrNotFound (or a GoneError)
// for a sandbox that does not run.
func (b *Backend) StatsWithToken(ctx context.Context, id, token string) (backend.Stats, error) {
	in, err := b.Lookup(ctx, id)
	if err != nil {
		return backend.Stats{}, err
	}
	m, err := b.agent(in.Addr, token).Metrics(ctx)
	if err != nil {
		return backend.Stats{}, fmt.Errorf("metrics of %s: %w", id, err)
	}
	return backend.Stats{
		Timestamp: time.Unix(m.Timestamp, 0).UTC(), CPUCount: m.CPUCount, CPUUsedPct: m.CPUUsedPct,
		MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache, DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
	}, nil
}

// Logs implements backend.Backend from the sandbox container's log (the
// agent's JSON log on stdout and stderr) through the Kubernetes API, stamped
// by the kubelet. Kernel logs stay inside the sandbox on this backend.
func (b *Backend) Logs(ctx context.Context, id string, since time.Time, limit int) ([]backend.LogLine, error) {
	if _, err := b.Lookup(ctx, id); err != nil {
		return nil, err
	}
	opts := &corev1.PodLogOptions{Container: containerName, Timestamps: true}
	if !since.IsZero() {
		opts.SinceTime = &metav1.Time{Time: since}
	}
	if limit > 0 {
		n := int64(limit)
		opts.TailLines = &n
	}
	rc, err := b.client.CoreV1().Pods(b.cfg.Namespace).GetLogs(podName(id), opts).Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("logs of %s: %w", id, apiError(err))
	}
	defer rc.Close()
	return parseLogs(rc, since)
}

// parseLogs reads kubelet log lines ("<RFC 3339 time> <line>").
func parseLogs(r io.Reader, since time.Time) ([]backend.LogLine, error) {
	var out []backend.LogLine
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ts, line, _ := strings.Cut(sc.Text(), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || t.Before(since) {
			continue
		}
		out = append(out, backend.LogLine{Timestamp: t.UTC(), Line: line})
	}
	if err := sc.Err(); err != nil && !errors.Is(err, http.ErrBodyReadAfterClose) {
		return out, fmt.Errorf("read logs: %w", err)
	}
	return out, nil
}
