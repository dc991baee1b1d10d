package kube

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/egress/policy"
)

// EgressPolicyPrefix starts the name of a sandbox's own NetworkPolicy (then
// its ID): the egress of a sandbox with allowOut/denyOut addresses.
const EgressPolicyPrefix = "cubby-egress-"

// checkEgress returns an error wrapping backend.ErrNotSupported for the parts
// of p a NetworkPolicy cannot express: allowOut domains, header rules and an
// egressProxy are decided on names and requests only the single-host egress
// proxy sees. Addresses and CIDRs are supported.
func checkEgress(p *policy.Policy) error {
	if p.NeedsProxy() {
		return fmt.Errorf("network allowOut domains, rules and egressProxy need the single-host egress proxy; "+
			"the kubernetes backend enforces allowOut/denyOut addresses and CIDRs only (NetworkPolicy): %w", backend.ErrNotSupported)
	}
	return nil
}

// egressPolicy returns sandbox id's own NetworkPolicy for p (allowOut and
// denyOut addresses; the Pod then carries LabelInternet=false so only this
// policy grants it egress). As E2B defines it, an allowed entry beats a denied
// one and what no entry names is allowed; EgressExcept (the cluster's own
// ranges) stays unreachable whatever p allows.
func (b *Backend) egressPolicy(id string, p *policy.Policy, owner *corev1.Pod) *networkingv1.NetworkPolicy {
	var peers []networkingv1.NetworkPolicyPeer
	except4, except6 := b.exceptions()
	if !p.DeniesAll() {
		deny := append([]string(nil), except4...)
		for _, n := range p.Deny {
			deny = append(deny, n.Prefix.Masked().String())
		}
		peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: deny}},
			networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: except6}})
	}
	for _, n := range p.Allow {
		if block, ok := allowBlock(n.Prefix.Masked(), except4); ok {
			peers = append(peers, networkingv1.NetworkPolicyPeer{IPBlock: block})
		}
	}
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: EgressPolicyPrefix + id, Namespace: b.cfg.Namespace,
			Labels: map[string]string{LabelManagedBy: managedBy, LabelID: id}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: "true", LabelID: id}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		},
	}
	if len(peers) > 0 {
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: peers}}
	}
	if owner != nil {
		np.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID}}
	}
	return np
}

// allowBlock is the IPBlock of an allowed prefix minus the cluster ranges
// inside it; ok is false when the prefix lies inside a cluster range.
func allowBlock(allow netip.Prefix, except []string) (*networkingv1.IPBlock, bool) {
	block := &networkingv1.IPBlock{CIDR: allow.String()}
	for _, e := range except {
		ex, err := netip.ParsePrefix(e)
		if err != nil {
			continue
		}
		switch {
		case ex.Bits() <= allow.Bits() && ex.Contains(allow.Addr()):
			return nil, false
		case allow.Contains(ex.Addr()):
			block.Except = append(block.Except, ex.Masked().String())
		}
	}
	return block, true
}

// exceptions splits EgressExcept into IPv4 and IPv6 ranges.
func (b *Backend) exceptions() (v4, v6 []string) {
	for _, c := range b.cfg.EgressExcept {
		if containsColon(c) {
			v6 = append(v6, c)
		} else {
			v4 = append(v4, c)
		}
	}
	return v4, v6
}

// SetEgress implements backend.Backend with a NetworkPolicy of the sandbox's
// own: a policy with addresses and CIDRs only replaces it (the Pod is first
// relabelled out of the shared internet policy, so nothing wider applies
// meanwhile); nil removes it and gives the Pod the shared internet policy
// back. Errors: backend.ErrNotSupported for domains, rules and egressProxy
// (checkEgress), backend.ErrNotFound. Whether connections already open when
// a policy tightens are cut is up to the cluster's network plugin.
func (b *Backend) SetEgress(ctx context.Context, id string, p *policy.Policy) error {
	if p.IsZero() {
		if err := b.SetInternetAccess(ctx, id, true); err != nil {
			return err
		}
		return b.deleteEgressPolicy(ctx, id)
	}
	if err := checkEgress(p); err != nil {
		return err
	}
	if err := b.SetInternetAccess(ctx, id, false); err != nil {
		return err
	}
	pod, err := b.client.CoreV1().Pods(b.cfg.Namespace).Get(ctx, podName(id), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("sandbox %s: %w", id, backend.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("get pod %s: %w", podName(id), apiError(err))
	}
	return b.putEgressPolicy(ctx, b.egressPolicy(id, p, pod))
}

// putEgressPolicy creates np or replaces the spec of the existing one.
func (b *Backend) putEgressPolicy(ctx context.Context, np *networkingv1.NetworkPolicy) error {
	api := b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace)
	_, err := api.Create(ctx, np, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var have *networkingv1.NetworkPolicy
		if have, err = api.Get(ctx, np.Name, metav1.GetOptions{}); err == nil {
			have.Spec, have.OwnerReferences = np.Spec, np.OwnerReferences
			_, err = api.Update(ctx, have, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("network policy %s: %w", np.Name, apiError(err))
	}
	return nil
}

// deleteEgressPolicy deletes sandbox id's own NetworkPolicy, if any.
func (b *Backend) deleteEgressPolicy(ctx context.Context, id string) error {
	err := b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace).Delete(ctx, EgressPolicyPrefix+id, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete network policy %s%s: %w", EgressPolicyPrefix, id, apiError(err))
	}
	return nil
}
