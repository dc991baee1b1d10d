//go:build tools

// Package tools pins the CNCF distribution registry (the reference OCI
// registry server) that tests start on loopback to pull template base
// images from; `make registry` builds it into bin/registry.
package tools

import _ "github.com/distribution/distribution/v3/cmd/registry"
