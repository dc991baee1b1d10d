//go:build tools

// Package tools pins kwok (sigs.k8s.io/kwok), which simulates the nodes of the
// cluster tests' second tier: it marks Pods running and gives them IPs
// without running them. `make k8s-tools` builds bin/k8s/kwok from this module.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
