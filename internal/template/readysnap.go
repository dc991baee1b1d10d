package template

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/backend"
)

// ReadySnapshots lets a Builder start a template's sandboxes from a memory
// snapshot of its ready start command: the build's finalize sandbox boots
// as the template's sandboxes will (Request), and once its ready command
// passes it is captured (Snapshot). Only a backend.SnapshotFull capture
// (gVisor) is kept; under runtimes that cannot checkpoint a running
// sandbox (runc) the template's sandboxes run the start command at create.
// The server's local backend and control plane implement it.
type ReadySnapshots interface {
	// Request is the create request a sandbox of t boots with (the server's
	// boot options, CPU, memory, disk, CA bundle and sandbox environment),
	// without credentials and without a SandboxID, or why its sandboxes
	// cannot start from a ready snapshot (the runtime cannot checkpoint a
	// running sandbox, say): the build then checks the start command in a
	// build sandbox, as without ReadySnapshots, and takes no snapshot.
	Request(t SandboxTemplate) (backend.CreateRequest, error)
	// Snapshot and DeleteSnapshot are backend.Backend's.
	Snapshot(ctx context.Context, id, snapID string) (backend.Snapshot, error)
	DeleteSnapshot(ctx context.Context, snapID string) error
}

// SandboxTemplate is what a template build gives its sandboxes: its tree,
// runtime ("" = the server's), default user, workdir and environment, and
// start and ready commands.
type SandboxTemplate struct {
	ID, RootfsDir, Runtime string
	User, Workdir          string
	Env                    map[string]string
	StartCmd, ReadyCmd     string
}

// readySnapshotPrefix starts the backend snapshot ID of every template's
// ready snapshot; with the 32 hex digits of the build ID it makes 36
// characters, which no sandbox snapshot ID (20 characters) has.
const readySnapshotPrefix = "tmpl"

var readySnapshotRe = regexp.MustCompile(`^` + readySnapshotPrefix + `[0-9a-f]{32}$`)

// ReadySnapshotID is the backend snapshot ID of build buildID's ready
// snapshot ("tmpl" + the build ID's 32 hex digits), "" for a build ID that
// is not a UUID.
func ReadySnapshotID(buildID string) string {
	id := readySnapshotPrefix + strings.ReplaceAll(strings.ToLower(buildID), "-", "")
	if !readySnapshotRe.MatchString(id) {
		return ""
	}
	return id
}

// IsReadySnapshot reports whether backend snapshot id is a template's ready
// snapshot (see ReadySnapshotID).
func IsReadySnapshot(id string) bool { return readySnapshotRe.MatchString(id) }

// readySnap is the ready snapshot a build took.
type readySnap struct {
	ID      string // backend snapshot ID
	Runtime string // runtime name it was taken under (restores need the same)
}

// snapshotReady captures finalize sandbox id (ready, under runtime rt) as
// the build's ready snapshot. A failed or filesystem-only capture is logged
// and dropped: the template's sandboxes then run the start command at create.
func (r *run) snapshotReady(ctx context.Context, id, rt string) {
	rs := r.b.cfg.ReadySnapshots
	snapID := ReadySnapshotID(r.req.BuildID)
	if snapID == "" {
		r.logf(LevelWarn, StepFinalize, "[finalize] build ID %q is not a UUID: no memory snapshot; sandboxes run the start command at create", r.req.BuildID)
		return
	}
	sn, err := rs.Snapshot(ctx, id, snapID)
	if err != nil {
		r.logf(LevelWarn, StepFinalize, "[finalize] no memory snapshot of the ready sandbox (%v): sandboxes of this template run the start command at create", err)
		return
	}
	if sn.Mode != backend.SnapshotFull {
		r.dropReady(ctx, snapID)
		r.logf(LevelWarn, StepFinalize, "[finalize] runtime %s took no memory snapshot: sandboxes of this template run the start command at create", rt)
		return
	}
	r.ready = &readySnap{ID: snapID, Runtime: rt}
	r.logf(LevelInfo, StepFinalize, "[finalize] memory snapshot of the ready sandbox taken (%s, %.1f MiB, held %s): sandboxes of this template start from it with the start command running",
		rt, float64(sn.SizeBytes)/(1<<20), sn.Paused.Round(time.Millisecond))
}

// dropReady deletes the build's ready snapshot snapID (a failed build, or a
// capture without memory).
func (r *run) dropReady(ctx context.Context, snapID string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := r.b.cfg.ReadySnapshots.DeleteSnapshot(dctx, snapID); err != nil {
		r.b.log.Error("drop ready snapshot; pruned at next start", "snapshot", snapID, "err", err)
	}
}

// ReadySnapshots returns the ready snapshots of every tagged build (backend
// snapshot IDs): what a server keeps when it prunes snapshots at start.
func (m *Manager) ReadySnapshots() ([]string, error) {
	builds, err := m.builds()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range builds {
		if b.Snapshot != "" && !slices.Contains(out, b.Snapshot) {
			out = append(out, b.Snapshot)
		}
	}
	return out, nil
}

// PruneReadySnapshots drops (with drop, backend.Backend.DeleteSnapshot)
// every ready snapshot in held (the backend's snapshot IDs, read before the
// call) that no tagged build has any more: the builds a template delete or
// a rebuild replaced. It waits for running builds to finish (a build
// records its snapshot when it publishes) and returns how many it dropped.
func (m *Manager) PruneReadySnapshots(ctx context.Context, held []string, drop func(context.Context, string) error) (int, error) {
	unlock, err := m.flock(ctx, gcLock, unix.LOCK_EX)
	if err != nil {
		return 0, err
	}
	defer unlock()
	live, err := m.ReadySnapshots()
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, id := range held {
		if !IsReadySnapshot(id) || slices.Contains(live, id) {
			continue
		}
		if err := drop(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("drop ready snapshot %s: %w", id, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
