package kube

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Names of the NetworkPolicies EnsurePolicies keeps in the namespace.
const (
	// PolicyIsolation selects every sandbox Pod: ingress only from the
	// replicas (ReplicaSelector), no egress at all (other policies add some).
	PolicyIsolation = "cubby-sandbox-isolation"
	// PolicyInternet lets sandbox Pods labelled LabelInternet=true reach
	// public addresses: everything but EgressExcept.
	PolicyInternet = "cubby-sandbox-internet"
)

// Policies returns the NetworkPolicies that isolate sandbox Pods from each
// other and from the cluster. Enforcing them is the cluster network plugin's
// job (one that implements NetworkPolicy, such as Calico or Cilium).
func (b *Backend) Policies() []*networkingv1.NetworkPolicy {
	sandboxes := metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: "true"}}
	online := metav1.LabelSelector{MatchLabels: map[string]string{LabelSandbox: "true", LabelInternet: "true"}}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: b.cfg.Namespace, Labels: map[string]string{LabelManagedBy: managedBy}}
	}
	v4, v6 := b.exceptions()
	return []*networkingv1.NetworkPolicy{{
		ObjectMeta: meta(PolicyIsolation),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: sandboxes,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				PodSelector: &metav1.LabelSelector{MatchLabels: b.cfg.ReplicaSelector},
			}}}},
		},
	}, {
		ObjectMeta: meta(PolicyInternet),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: online,
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: v4}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: v6}},
			}}},
		},
	}}
}

func containsColon(s string) bool { return strings.Contains(s, ":") }

// EnsurePolicies creates the NetworkPolicies of Policies, or updates them
// when they differ. Replicas call it at start; racing replicas converge.
func (b *Backend) EnsurePolicies(ctx context.Context) error {
	api := b.client.NetworkingV1().NetworkPolicies(b.cfg.Namespace)
	for _, want := range b.Policies() {
		have, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, want, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				err = nil
			}
		case err == nil && !reflect.DeepEqual(have.Spec, want.Spec):
			have.Spec = want.Spec
			_, err = api.Update(ctx, have, metav1.UpdateOptions{})
			if apierrors.IsConflict(err) {
				err = nil // another replica updated it
			}
		}
		if err != nil {
			return fmt.Errorf("network policy %s: %w", want.Name, apiError(err))
		}
	}
	return nil
}
