//go:build tools

// Package tools pins gVisor (gvisor.dev/gvisor) for building the runsc OCI runtime
// with `go build -o bin/runsc gvisor.dev/gvisor/runsc` from this module; see the
// `runsc` target of the top-level Makefile. It is never compiled into Cubby.
package tools

import _ "gvisor.dev/gvisor/runsc"
