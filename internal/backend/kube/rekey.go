package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
)

// Sandbox Pods created or claimed by a replica of a release before the
// gateway held the client credentials run agents initialised with the
// clients' access token itself; today's gateway forwards only the link
// credential (agentapi.LinkToken of it), which such an agent refuses. Rekey
// gives such an agent its link credential once, authenticated with the token
// it still holds, and marks the Pod (AnnLink). The raw token only ever goes
// to a Pod without the mark, whose agent was given that token at its /init
// anyway: a marked Pod (every Pod this release creates or claims) never
// receives it, whatever its agent answers.

// rekeyTimeout bounds the agent's answer to the re-key /init.
const rekeyTimeout = 10 * time.Second

// Rekey re-keys the agent of sandbox id when its Pod lacks AnnLink (it was
// initialised by an older replica with accessToken, the clients' access
// token from the sandbox record): it posts an /init carrying only
// agentapi.LinkToken(accessToken), authenticated with accessToken, then sets
// AnnLink. An agent that refuses it but accepts the link credential (an
// earlier re-key whose mark was not written) is only marked. A marked Pod is
// left alone: the answer is false and nothing is sent. The mark is checked on
// the informer cache and again on the API server before the token is sent.
// rekeyed reports that this call re-keyed or marked the Pod. Errors:
// backend.ErrNotFound for a sandbox without a running claimed Pod, an agent
// that accepts neither credential, a mark the API server refuses.
func (b *Backend) Rekey(ctx context.Context, id, accessToken string) (rekeyed bool, err error) {
	if cached, err := b.pods.Get(podName(id)); err == nil && linked(cached) {
		return false, nil
	}
	pod, err := b.client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, fmt.Errorf("sandbox %s: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("pod of %s: %w", id, apiError(err))
	}
	if linked(pod) {
		return false, nil
	}
	in, err := instance(pod)
	if err != nil {
		return false, err
	}
	if accessToken != "" {
		if err := b.rekeyAgent(ctx, in.Addr, accessToken); err != nil {
			return false, fmt.Errorf("re-key the agent of %s (initialised by an older release): %w", id, err)
		}
	}
	if err := b.markLinked(ctx, pod); err != nil {
		return false, err
	}
	b.log.Info("agent re-keyed to its link credential (pod initialised by an older release)", "sandbox", id)
	return true, nil
}

// linked reports whether pod carries AnnLink.
func linked(pod *corev1.Pod) bool { return pod.Annotations[AnnLink] == "true" }

// rekeyAgent posts the link credential of accessToken to the agent at addr,
// authenticated with accessToken; when the agent refuses, with the link
// credential itself (it holds that already when an earlier re-key was not
// marked). Errors: the agent accepts neither.
func (b *Backend) rekeyAgent(ctx context.Context, addr netip.Addr, accessToken string) error {
	ctx, cancel := context.WithTimeout(ctx, rekeyTimeout)
	defer cancel()
	link := agentapi.LinkToken(accessToken)
	init := agentapi.InitRequest{AccessToken: link, Timestamp: time.Now().UTC()}
	err := b.agent(addr, accessToken).Init(ctx, init)
	if err == nil {
		return nil
	}
	if errLink := b.agent(addr, link).Init(ctx, init); errLink != nil {
		return fmt.Errorf("with the access token: %w; with the link credential: %w", err, errLink)
	}
	return nil
}

// markLinked sets AnnLink on pod (a merge patch preconditioned on its UID).
func (b *Backend) markLinked(ctx context.Context, pod *corev1.Pod) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid": pod.UID, "annotations": map[string]string{AnnLink: "true"},
	}})
	if err != nil {
		return fmt.Errorf("encode link mark: %w", err)
	}
	_, err = b.client.CoreV1().Pods(b.cfg.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("mark pod %s linked: %w", pod.Name, apiError(err))
	}
	return nil
}
