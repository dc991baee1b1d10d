#!/usr/bin/env bash
# Builds the Kubernetes binaries the cluster tests start into bin/k8s/:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and helm
# (tools/k8s), kwok (tools/kwok) and etcd (tools/etcd), each from a pinned
# tools module. The build is cached by content: the outputs live in
# .cache/k8s-tools/<key>/, where <key> hashes the tools modules (go.mod,
# go.sum, tools.go), the Go version and the link flags; a cache hit only
# relinks bin/k8s. A cold build takes several minutes on 2 cores (the
# Kubernetes binaries dominate); keep .cache between CI runs to skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
k8s_version=v1.34.3
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34"
key=$( { cat tools/k8s/go.mod tools/k8s/go.sum tools/k8s/tools.go tools/kwok/go.mod tools/kwok/go.sum tools/kwok/tools.go \
  tools/etcd/go.mod tools/etcd/go.sum tools/etcd/tools.go; go version; echo "$ldflags"; } | sha256sum | cut -c1-16)
out="$PWD/.cache/k8s-tools/$key"
if [[ ! -f "$out/.complete" ]]; then
  echo "k8s-tools: building into $out (cold: several minutes)" >&2
  rm -rf "$out" && mkdir -p "$out"
  start=$SECONDS
  (cd tools/etcd && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
  (cd tools/kwok && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/" sigs.k8s.io/kwok/cmd/kwok)
  (cd tools/k8s && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet helm.sh/helm/v3/cmd/helm)
  touch "$out/.complete"
  echo "k8s-tools: built in $((SECONDS - start)) s" >&2
fi
mkdir -p bin
rm -rf bin/k8s
ln -s "$out" bin/k8s
