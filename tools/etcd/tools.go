//go:build tools

// Package tools pins etcd (go.etcd.io/etcd/server/v3), the store of the
// cluster tests' kube-apiserver. `make k8s-tools` builds bin/k8s/etcd from
// this module.
package tools

import _ "go.etcd.io/etcd/server/v3"
