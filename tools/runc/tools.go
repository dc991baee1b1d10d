//go:build tools

// Package tools pins runc (github.com/opencontainers/runc) for building the runc
// OCI runtime with `go build -o bin/runc github.com/opencontainers/runc` from this
// module (cgo, libseccomp); see the `runc` target of the top-level Makefile. It is
// never compiled into Cubby.
package tools

import _ "github.com/opencontainers/runc"
