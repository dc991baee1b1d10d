package kube

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/egress/policy"
)

func mustPolicy(t *testing.T, s policy.Spec) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEgressPolicy: allowOut/denyOut addresses become the sandbox's own
// NetworkPolicy, admitted by the real API server (ipBlock excepts inside
// their CIDRs), with the Pod taken out of the shared internet policy; an
// allowed range inside the cluster's stays unreachable; domains, rules and
// egressProxy are refused as unsupported (at create: before any Pod); nil
// and Kill remove the policy.
func TestEgressPolicy(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	b := newBackend(t, c, ns, nil)
	ctx := context.Background()
	req := request("egress0000000000001")
	req.NoInternet = false
	pod, err := b.podFor(req, StateClaimed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := mustPolicy(t, policy.Spec{AllowOut: []string{"1.1.1.1", "8.0.0.0/7", "10.1.0.0/16"}, DenyOut: []string{"8.8.8.0/24", "0.0.0.0/0"}})
	if err := b.SetEgress(ctx, req.SandboxID, p); err != nil {
		t.Fatal(err)
	}
	np, err := c.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, EgressPolicyPrefix+req.SandboxID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cidrs []string
	for _, peer := range np.Spec.Egress[0].To {
		cidrs = append(cidrs, peer.IPBlock.CIDR)
	}
	if len(cidrs) != 2 || cidrs[0] != "1.1.1.1/32" || cidrs[1] != "8.0.0.0/7" || np.Spec.PodSelector.MatchLabels[LabelID] != req.SandboxID ||
		len(np.OwnerReferences) != 1 || np.OwnerReferences[0].Name != pod.Name {
		t.Fatalf("egress policy peers %v (10.1.0.0/16 is the cluster's: never allowed), spec %+v", cidrs, np.Spec)
	}
	if got, _ := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); got.Labels[LabelInternet] != "false" {
		t.Fatalf("pod still in the shared internet policy: %v", got.Labels)
	}
	open := mustPolicy(t, policy.Spec{DenyOut: []string{"203.0.113.0/24"}})
	if err := b.SetEgress(ctx, req.SandboxID, open); err != nil {
		t.Fatal(err)
	}
	np, _ = c.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, EgressPolicyPrefix+req.SandboxID, metav1.GetOptions{})
	if v4 := np.Spec.Egress[0].To[0].IPBlock; v4.CIDR != "0.0.0.0/0" || !contains(v4.Except, "203.0.113.0/24") || !contains(v4.Except, "10.0.0.0/8") {
		t.Fatalf("deny-only policy: %+v", np.Spec.Egress)
	}
	domains := mustPolicy(t, policy.Spec{AllowOut: []string{"example.com"}, DenyOut: []string{"0.0.0.0/0"}})
	if err := b.SetEgress(ctx, req.SandboxID, domains); !errors.Is(err, backend.ErrNotSupported) {
		t.Fatalf("domain allowOut: %v, want ErrNotSupported", err)
	}
	cold := request("egress0000000000002")
	cold.Egress = domains
	if _, err := b.Create(ctx, cold); !errors.Is(err, backend.ErrNotSupported) {
		t.Fatalf("create with domain allowOut: %v, want ErrNotSupported", err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Get(ctx, podName(cold.SandboxID), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a refused create left a pod: %v", err)
	}
	if err := b.SetEgress(ctx, req.SandboxID, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, EgressPolicyPrefix+req.SandboxID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("policy after SetEgress(nil): %v", err)
	}
	if got, _ := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{}); got.Labels[LabelInternet] != "true" {
		t.Fatalf("pod not back in the internet policy: %v", got.Labels)
	}
	if err := b.SetEgress(ctx, req.SandboxID, p); err != nil {
		t.Fatal(err)
	}
	if err := b.Kill(ctx, req.SandboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.NetworkingV1().NetworkPolicies(ns).Get(ctx, EgressPolicyPrefix+req.SandboxID, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("policy after Kill: %v", err)
	}
	if err := b.SetEgress(ctx, "egress0000000000009", p); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("unknown sandbox: %v", err)
	}
}
