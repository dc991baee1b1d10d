//go:build tools

// Package tools pins the Kubernetes components the cluster tests start (a real
// kube-apiserver, kube-controller-manager, kube-scheduler and kubelet from
// k8s.io/kubernetes) and Helm, which renders the chart in deploy/helm. `make k8s-tools` builds them into bin/k8s/ from this module; they
// are never compiled into Cubby.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
