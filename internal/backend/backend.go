// Package backend defines the seam between the control plane and whatever runs
// sandboxes: the local host today (runc or runsc over overlay rootfs and a netns
// per sandbox), a cluster engine later. The control plane owns records, keys and
// lifecycle; a backend owns processes, mounts, networks and cgroups.
package backend

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/egress/policy"
)

// ErrNotFound is returned for a sandbox the backend does not run.
var ErrNotFound = errors.New("sandbox not found in backend")

// ErrPaused is returned by Pause for a sandbox that is already paused.
var ErrPaused = errors.New("sandbox is paused")

// ErrNotPaused is returned by Resume for a sandbox that is running.
var ErrNotPaused = errors.New("sandbox is not paused")

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
	// Egress is the sandbox's egress policy (network allowOut, denyOut,
	// rules, egressProxy; package egress/policy); nil = none.
	Egress *policy.Policy
	// Boot are the agent's code-interpreter boot options (its command line).
	Boot agentapi.BootOptions
	// Init is sent to the agent once it answers /health, before Create returns.
	Init agentapi.InitRequest
	// Volumes are the volumes (Backend.CreateVolume) to mount, each at its
	// path; nil = none.
	Volumes []VolumeMount
	// Snapshot is the ID of a snapshot (Backend.Snapshot) to start from: the
	// sandbox gets the snapshot's files on a disk of its own (and RootfsDir is
	// taken from the snapshot); from a SnapshotFull one it is restored with
	// the snapshot's processes and memory (Start is not run again) and its
	// agent re-initialised with Init, which then also sets its hostname.
	// A full snapshot needs the runtime that took it and volumes at the same
	// paths (else an error wrapping ErrInvalid). "" = a fresh disk over
	// RootfsDir.
	Snapshot string
	// CABundle, when set, is a host PEM file bind-mounted read-only at
	// agentapi.CABundlePath (extra CAs of a TLS-intercepting egress proxy).
	CABundle string
	// Start, when set, is the template's start command: run in the
	// background once the agent is initialised (and again whenever the
	// sandbox boots from disk), Create returning once its ready command
	// succeeds.
	Start *StartCommand
	// Team, Metadata and Deadline describe the sandbox to backends that label
	// what they run for operators and other replicas (the kubernetes backend's
	// Pod labels and annotations); the local backend ignores them.
	Team     string
	Metadata map[string]string
	Deadline time.Time
}

// StartCommand is a template's start and ready commands (E2B startCmd,
// readyCmd). Both run through the agent as the sandbox's default user in its
// default workdir, with its environment, by bash -l -c (sh -c without bash).
type StartCommand struct {
	Cmd      string `json:"cmd"`
	ReadyCmd string `json:"readyCmd,omitempty"` // "" = ready once Cmd started
	// ReadyTimeout bounds the wait for ReadyCmd; 0 = DefaultReadyTimeout.
	ReadyTimeout time.Duration `json:"readyTimeout,omitempty"`
}

// DefaultReadyTimeout bounds how long a create waits for a template's ready command.
const DefaultReadyTimeout = 2 * time.Minute

// VolumeMount mounts volume ID read-write at Path (absolute, clean, not "/")
// inside a sandbox; the sandbox's root owns what the volume's root owns.
type VolumeMount struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

// ErrVolumeInUse is returned by DeleteVolume while a sandbox mounts the volume.
var ErrVolumeInUse = errors.New("volume is in use")

// ErrVolumeNotFound is returned for a volume the backend does not hold.
var ErrVolumeNotFound = errors.New("volume not found in backend")

// SnapshotMode says what a snapshot holds (reported as a snapshot's `mode`).
type SnapshotMode string

// Snapshot modes.
const (
	// SnapshotFilesystem: the sandbox's files. A sandbox started from it boots
	// afresh on them: processes and memory are not kept. Taken under runtimes
	// without a working checkpoint (runc).
	SnapshotFilesystem SnapshotMode = "filesystem"
	// SnapshotFull: files, memory and processes; a sandbox started from it
	// continues where the source was, under its own identity. Taken under
	// runtimes implementing runtime.Snapshotter (gVisor).
	SnapshotFull SnapshotMode = "full"
)

// Snapshot is a captured sandbox state as the backend reports it.
type Snapshot struct {
	ID   string
	Mode SnapshotMode
	// SizeBytes is the disk space the snapshot itself takes (bytes allocated);
	// the template and the snapshots it was started from are shared, not counted.
	SizeBytes int64
	// Paused is how long the source sandbox was held for the capture (under
	// SnapshotFilesystem: how long its disk's writers were blocked).
	Paused time.Duration
}

// ErrSnapshotNotFound is returned by Create for a snapshot the backend does not
// hold (never taken, or deleted).
var ErrSnapshotNotFound = errors.New("snapshot not found in backend")

// ErrTooDeep is returned by Snapshot for a sandbox started from a chain of
// snapshots as long as the backend stacks.
var ErrTooDeep = errors.New("snapshot chain too long")

// GoneError is a sandbox the backend ran and no longer runs, with why (e.g.
// "pod evicted: The node was low on resource: memory"). errors.Is(err,
// ErrNotFound) holds for it.
type GoneError struct {
	SandboxID string
	Reason    string
}

// Error implements error.
func (e *GoneError) Error() string { return "sandbox " + e.SandboxID + " is gone: " + e.Reason }

// Is makes a GoneError match ErrNotFound.
func (e *GoneError) Is(target error) bool { return target == ErrNotFound }

// ErrInvalid is wrapped by Create when the request cannot run as configured
// (e.g. a runtime class the cluster does not have); the control plane answers 400.
var ErrInvalid = errors.New("invalid sandbox request")

// ErrUnavailable is wrapped when what runs sandboxes cannot be reached (e.g.
// the Kubernetes API); the control plane answers 503.
var ErrUnavailable = errors.New("backend unavailable")

// PauseMode says what a paused sandbox kept (reported by getInfo as `pauseMode`).
type PauseMode string

// Pause modes. The backend picks one from the sandbox's runtime and the pause
// request's `memory` flag (docs/wire/e2b-api.md §2.3 pause body).
const (
	// PauseMemory: the processes are frozen (cgroup freezer) and stay in RAM;
	// resume thaws them. Chosen for runtimes without checkpoint when memory is kept.
	PauseMemory PauseMode = "memory"
	// PauseFilesystem: the container is stopped and its memory freed; the disk and
	// the network address are kept. Resume starts the sandbox again: files are
	// intact, processes (and in-memory state) are not. Chosen for memory=false.
	PauseFilesystem PauseMode = "filesystem"
	// PauseCheckpoint: memory and processes are saved to disk (the runtime's
	// checkpoint), the container is stopped and its memory freed; resume restores
	// the processes with their memory. Chosen for runtimes implementing
	// runtime.Checkpointer (gVisor) when memory is kept.
	PauseCheckpoint PauseMode = "checkpoint"
)

// Instance is a running (or paused) sandbox as the backend knows it.
type Instance struct {
	SandboxID string
	Addr      netip.Addr // address the host reaches the sandbox's ports on
	// HostIface is the host interface the sandbox is reached over (its own
	// point-to-point link); every host connection to Addr must be bound to it
	// (internal/linkdial). "" when the backend has no per-sandbox interface.
	HostIface string
	Runtime   string
	Paused    bool
	PauseMode PauseMode // "" while running
	StartedAt time.Time
}

// PauseOptions are the options of Backend.Pause.
type PauseOptions struct {
	// KeepMemory asks for the processes' memory to survive the pause (E2B's pause
	// body `memory`, default true). False selects PauseFilesystem.
	KeepMemory bool
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

// LogLine is one line of a sandbox's logs.
type LogLine struct {
	// Timestamp is when the host received the line (or, for a host record, wrote
	// it). A kernel log line carries its own "time" field when it is a JSON log
	// record, otherwise that of the record before it in the same file (or, with
	// none, the file's modification time).
	Timestamp time.Time
	// Source says who wrote the line, as the host knows it: "host" (the server),
	// "sandbox" (the sandbox's stdout/stderr: its agent or any process inside) or
	// "kernel" (a code-interpreter kernel's log inside the sandbox).
	Source string
	// Line is the line without its newline; a JSON object carries Source as its
	// "source" member (package sandboxlog, Label), whatever it said itself.
	Line string
}

// Backend runs sandboxes. Implementations are safe for concurrent use.
type Backend interface {
	// Create prepares the rootfs, network and cgroup, starts the agent, waits until it
	// is healthy and initialised, and returns the instance. On error nothing is left behind.
	Create(ctx context.Context, req CreateRequest) (Instance, error)
	// Kill stops the sandbox and frees every resource it held. Unknown IDs return nil.
	Kill(ctx context.Context, id string) error
	// Pause pauses a running sandbox in the mode chosen from its runtime and opts
	// and returns that mode. On error the sandbox keeps running as before. Errors:
	// ErrNotFound, ErrPaused (already paused), ErrNotSupported.
	Pause(ctx context.Context, id string, opts PauseOptions) (PauseMode, error)
	// Resume brings a paused sandbox back (thaw, restore or restart, per its pause
	// mode) and returns the running instance. Errors: ErrNotFound, ErrNotPaused,
	// ErrNotSupported; after a failed resume the sandbox is still paused.
	Resume(ctx context.Context, id string) (Instance, error)
	// Reinit sends a new init (POST /init: env vars, access token, defaults) to
	// the agent of a running sandbox, authenticated with the token it holds, and
	// records it so the agent gets it again whenever it restarts. A warm pool
	// uses it to hand a pre-booted sandbox to a create request. Errors:
	// ErrNotFound, ErrPaused, and the agent's refusal.
	Reinit(ctx context.Context, id string, init agentapi.InitRequest) error
	// SetInternetAccess allows or blocks traffic from a running sandbox to
	// anything outside the host (create's allow_internet_access), and records it
	// so a rebuilt network keeps it. Errors: ErrNotFound, ErrPaused.
	SetInternetAccess(ctx context.Context, id string, allowed bool) error
	// SetEgress replaces the egress policy of a running or paused sandbox (nil =
	// none) at once: from its return on, connections the policy denies are
	// refused and live ones it denies are cut; a sandbox whose rules rewrite
	// HTTPS gets the egress CA installed (removed when they go). Errors:
	// ErrNotFound, ErrNotSupported.
	SetEgress(ctx context.Context, id string, p *policy.Policy) error
	// Lookup returns the instance for id or ErrNotFound.
	Lookup(ctx context.Context, id string) (Instance, error)
	// Stats samples the sandbox's cgroup and disk usage. A sandbox paused in
	// PauseFilesystem or PauseCheckpoint mode has no cgroup: ErrPaused.
	Stats(ctx context.Context, id string) (Stats, error)
	// Logs returns the sandbox's output lines (what its agent and any process
	// writes to its stdout/stderr, drained by the host at a bounded rate into a
	// capped log) and the host's records about it, merged with its kernels'
	// output (agentapi.KernelLogDir), each labelled with its source (LogLine),
	// stamped at or after since (zero = from the start), oldest first, at most
	// limit of them (the most recent ones when more match). Only the logs'
	// tails (a bounded number of bytes) are read. Errors: ErrNotFound.
	Logs(ctx context.Context, id string, since time.Time, limit int) ([]LogLine, error)
	// Snapshot captures the state of running sandbox id as snapshot snapID (a
	// name the caller chose: [a-z0-9]{1,64}) and returns it; the sandbox keeps
	// running, held only for Snapshot.Paused. The snapshot is complete when
	// Snapshot returns; after a crash it is either complete or absent. Errors:
	// ErrNotFound, ErrPaused, ErrTooDeep; on any error nothing is kept and the
	// sandbox runs on.
	Snapshot(ctx context.Context, id, snapID string) (Snapshot, error)
	// DeleteSnapshot deletes snapshot snapID: new sandboxes can no longer start
	// from it, and its data goes as soon as no sandbox or snapshot uses it.
	// Unknown IDs return nil.
	DeleteSnapshot(ctx context.Context, snapID string) error
	// PruneSnapshots deletes (as DeleteSnapshot) every snapshot not in known
	// and removes captures a crash left incomplete. Called after Recover.
	PruneSnapshots(ctx context.Context, known []string) error
	// CreateVolume creates volume id ([a-z0-9]{1,64}) holding up to
	// sizeBytes of files; it is complete when CreateVolume returns (on error
	// nothing is kept).
	CreateVolume(ctx context.Context, id string, sizeBytes int64) error
	// DeleteVolume deletes volume id with its files. Errors: ErrVolumeInUse
	// while a sandbox (running or paused) mounts it. Unknown IDs return nil.
	DeleteVolume(ctx context.Context, id string) error
	// OpenVolume returns the root of volume id's files for reading and
	// writing from the host (the volume content API); the caller closes it.
	// Errors: ErrVolumeNotFound.
	OpenVolume(ctx context.Context, id string) (*os.Root, error)
	// PruneVolumes deletes every volume not in known and not in use (a crash
	// between create and record). Called after Recover.
	PruneVolumes(ctx context.Context, known []string) error
	// Recover re-adopts sandboxes that survived a restart of the server. It is given
	// the IDs the store believes are alive and returns those really alive, running
	// or paused in any mode (a sandbox paused to disk has no container but is
	// alive); every other resource the backend finds (containers, mounts, netns,
	// cgroups) is cleaned up.
	Recover(ctx context.Context, known []string) ([]Instance, error)
	// Close releases host-wide resources held by the backend (not the sandboxes).
	Close() error
}

// ValidVolumePath reports why p cannot be a volume mount path ("" when it
// can): it must be absolute and clean, not "/", and outside the kernel and
// agent paths (/proc, /sys, /dev, the agent binary's /opt/cubby).
func ValidVolumePath(p string) string {
	switch {
	case !strings.HasPrefix(p, "/") || filepath.Clean(p) != p:
		return "must be an absolute, clean path (no '..', '.', '//' or trailing '/')"
	case p == "/":
		return "must not be /"
	}
	for _, reserved := range []string{"/proc", "/sys", "/dev", "/opt/cubby", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf"} {
		if p == reserved || strings.HasPrefix(p, reserved+"/") {
			return "must not be in " + reserved
		}
	}
	return ""
}
