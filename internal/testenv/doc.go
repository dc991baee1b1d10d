// Package testenv is the roof of Cubby's test environments: packages that
// start or prepare real things on this host for tests (a real server, cluster,
// registry, database, network namespace, internet stand-in, root filesystem or
// cgroup). It holds no code itself.
//
// Naming: each environment is a sub-package named "test" + what it gives a
// test, used as testserver.Start, testkube.Launch, and so on:
//
//   - testhost: facts about this host (repository root, free ports and
//     subnets, random names, release of left-behind mounts)
//   - testserver: a real `cubby serve` process (CUBBY_BIN) and the Go SDK
//     helpers the end-to-end suites under test/ share
//   - testkube: real Kubernetes control planes and nodes (test/cluster)
//   - testregistry: a real OCI registry with test images
//   - testpostgres: a real PostgreSQL server
//   - testnetns: code and UDP sinks inside a network namespace
//   - testinternet: stand-ins for the internet egress tests talk to
//   - testrootfs: tiny root filesystem trees (static busybox)
//   - testcgroup: throwaway cgroups with a real memory limit
//   - testsdk: the official E2B code-interpreter SDKs (JS and Python, pinned)
//     installed, and the scripts test/cluster and test/integration run with them
//
// Conformance suites and fakes are not environments: following containerd,
// the suite of an interface lives next to it as <iface>test
// (internal/runtime/runtimetest for runtime.Runtime, internal/store/storetest
// for the stores), and a fake lives next to its only consumer (the pool's
// fake of pool.Backend in internal/pool, the control plane's fake backend in
// internal/controlplane).
package testenv
