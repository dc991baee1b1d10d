// Package backend defines the seam between the control plane and whatever runs
// sandboxes: the local host today (runc or runsc over overlay rootfs and a netns
// per sandbox), a cluster engine later. The control plane owns records, keys and
// lifecycle; a backend owns processes, mounts, networks and cgroups.
package backend

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// ErrNotFound is returned for a sandbox the backend does not run.
var ErrNotFound = errors.New("sandbox not found in backend")

// ErrNotSupported is returned for an operation the backend or its runtime cannot do.
var ErrNotSupported = errors.New("not supported by this backend")

// CreateRequest describes one sandbox to start.
type CreateRequest struct {
	SandboxID  string // [a-z0-9]{20}
	TemplateID string // resolved template ID
	RootfsDir  string // absolute path of the template's immutable rootfs tree
	Runtime    string // runtime name; "" = the backend's default
	CPUCount   int    // CPUs (quota), >= 1
	MemoryMB   int    // memory limit in MiB
	DiskSizeMB int    // writable layer size in MiB
	// NoInternet blocks traffic from the sandbox to anything outside the host
	// (create's allow_internet_access=false); the gateway still reaches it.
	NoInternet bool
	// Init is sent to the agent once it answers /health, before Create returns.
	Init agentapi.InitRequest
}

// Instance is a running (or paused) sandbox as the backend knows it.
type Instance struct {
	SandboxID string
	Addr      netip.Addr // address the host reaches the sandbox's ports on
	Runtime   string
	Paused    bool
	StartedAt time.Time
}

// Stats is one sample of a sandbox's resource use read from its cgroup and disk.
type Stats struct {
	Timestamp  time.Time
	CPUCount   int
	CPUUsedPct float64 // percent of one CPU times CPUCount, averaged since the previous sample
	CPUUsageNs uint64  // cumulative CPU time in ns
	MemUsed    uint64  // bytes
	MemTotal   uint64  // bytes (the limit)
	MemCache   uint64  // bytes
	DiskUsed   uint64  // bytes of the writable layer
	DiskTotal  uint64  // bytes of the writable layer
}

// Backend runs sandboxes. Implementations are safe for concurrent use.
type Backend interface {
	// Create prepares the rootfs, network and cgroup, starts the agent, waits until it
	// is healthy and initialised, and returns the instance. On error nothing is left behind.
	Create(ctx context.Context, req CreateRequest) (Instance, error)
	// Kill stops the sandbox and frees every resource it held. Unknown IDs return nil.
	Kill(ctx context.Context, id string) error
	// Pause freezes a running sandbox, or returns ErrNotSupported.
	Pause(ctx context.Context, id string) error
	// Resume thaws a paused sandbox, or returns ErrNotSupported.
	Resume(ctx context.Context, id string) error
	// Lookup returns the instance for id or ErrNotFound.
	Lookup(ctx context.Context, id string) (Instance, error)
	// Stats samples the sandbox's cgroup and disk usage.
	Stats(ctx context.Context, id string) (Stats, error)
	// Recover re-adopts sandboxes that survived a restart of the server. It is given
	// the IDs the store believes are alive and returns those really running; every
	// other resource the backend finds (containers, mounts, netns) is cleaned up.
	Recover(ctx context.Context, known []string) ([]Instance, error)
	// Close releases host-wide resources held by the backend (not the sandboxes).
	Close() error
}
