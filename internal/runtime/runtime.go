// Package runtime defines the OCI runtime seam: how a prepared OCI bundle is turned
// into a running sandbox and controlled afterwards. runc implements it today; gVisor's
// runsc (same bundle) and VM runtimes plug in behind the same interface.
package runtime

import (
	"context"
	"errors"
	"os"
	"time"
)

// ErrNotFound is returned when the runtime has no container with the given ID.
var ErrNotFound = errors.New("container not found")

// ErrNotSupported is returned for an operation this runtime cannot perform.
var ErrNotSupported = errors.New("operation not supported by this runtime")

// Status is the OCI runtime-spec container status.
type Status string

// Container states as reported by `runtime state` (OCI runtime spec "status").
const (
	StatusCreating Status = "creating"
	StatusCreated  Status = "created"
	StatusRunning  Status = "running"
	StatusPaused   Status = "paused"
	StatusStopped  Status = "stopped"
)

// State is the runtime's view of one container.
type State struct {
	ID     string
	Status Status
	Pid    int    // host PID of the container's init process, 0 when stopped
	Bundle string // absolute bundle directory
}

// Runtime starts and controls containers from OCI bundles.
// Implementations must be safe for concurrent use on distinct IDs.
type Runtime interface {
	// Name is the runtime's short name ("runc", "runsc").
	Name() string
	// Start creates and starts the container id from the bundle directory (which holds
	// config.json and the rootfs the spec names). The container's stdout and stderr are
	// output (its stdin /dev/null): the write end of a pipe or FIFO the caller drains,
	// never a host file the container could grow. The caller keeps output and may
	// close it once Start returns. It returns once the init process runs.
	Start(ctx context.Context, id, bundle string, output *os.File) error
	// State reports the container's state, or ErrNotFound.
	State(ctx context.Context, id string) (State, error)
	// List reports every container this runtime instance knows (its state root).
	List(ctx context.Context) ([]State, error)
	// Kill sends SIGKILL to every process of the container, waits for it to stop and
	// deletes it. Killing an unknown container returns nil (idempotent).
	Kill(ctx context.Context, id string) error
	// Pause freezes every process of the container (cgroup freezer).
	Pause(ctx context.Context, id string) error
	// Resume thaws a paused container.
	Resume(ctx context.Context, id string) error
}

// Checkpointer is implemented by runtimes that can save a running container to disk and restore it.
// Callers find it with a type assertion on a Runtime (runsc implements it; runc does not, as
// CRIU 3.x fails on kernels from 6.13: docs/isolation.md, "runc and gVisor").
type Checkpointer interface {
	// Checkpoint saves the memory and kernel state of every process of container id
	// into the directory imageDir (created if missing) and stops and deletes the
	// container; files it wrote stay in its root filesystem. Errors wrap ErrNotFound
	// for unknown containers.
	Checkpoint(ctx context.Context, id, imageDir string) error
	// Restore recreates container id from the bundle directory and the image saved
	// by Checkpoint in imageDir, its processes resuming where they were. The bundle's
	// root filesystem must be mounted with the content it had at Checkpoint. Its
	// stdout and stderr are output, as for Runtime.Start. It returns once the
	// processes run.
	Restore(ctx context.Context, id, bundle, imageDir string, output *os.File) error
}

// Snapshotter is implemented by runtimes that can save the memory and processes
// of a container that keeps running (runsc does).
type Snapshotter interface {
	// CheckpointRunning pauses container id, saves the memory and kernel state
	// of its processes into imageDir (created if missing; the image Restore
	// takes), calls hold while the container is still paused (the caller
	// captures its files there, so they match the image), and resumes it. It
	// returns how long the container's processes were held. On any error the
	// container is resumed and runs on; imageDir may hold a partial image.
	// Errors wrap ErrNotFound for unknown containers.
	CheckpointRunning(ctx context.Context, id, imageDir string, hold func() error) (time.Duration, error)
}

// UsernsCreator is implemented by runtimes that cannot join an existing user
// namespace by path: given the spec's uid and gid mappings without a path they
// create the sandbox's user namespace themselves (runsc: its launcher is a
// multithreaded Go process, and setns(2) into a user namespace needs a
// single-threaded caller). Runtimes without it (runc) join the namespace file
// the backend names.
type UsernsCreator interface {
	// CreatesUserns reports whether the runtime creates the user namespace.
	CreatesUserns() bool
}
