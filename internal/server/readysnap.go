package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/backend/local"
	"github.com/cubby-dev/cubby/internal/controlplane"
	"github.com/cubby-dev/cubby/internal/template"
)

// readySnapshots gives template builds the ready snapshots of their start
// commands (template.ReadySnapshots): the finalize sandbox boots as the
// control plane boots the template's sandboxes, and the local backend
// captures it. Under a runtime that cannot checkpoint (runc), and until the
// control plane is set (first-start builds of the built-ins), builds take
// no snapshot.
type readySnapshots struct {
	*local.Backend
	control atomic.Pointer[controlplane.Service]
}

// Request implements template.ReadySnapshots.
func (r *readySnapshots) Request(t template.SandboxTemplate) (backend.CreateRequest, error) {
	if rt, ok := r.CanCheckpoint(t.Runtime); !ok {
		return backend.CreateRequest{}, fmt.Errorf("runtime %s cannot checkpoint a running sandbox", rt)
	}
	cp := r.control.Load()
	if cp == nil {
		return backend.CreateRequest{}, errors.New("the server is still starting")
	}
	return cp.SandboxRequest(controlplane.TemplateRef{ID: t.ID, RootfsDir: t.RootfsDir, Runtime: t.Runtime,
		User: t.User, Workdir: t.Workdir, Env: t.Env, StartCmd: t.StartCmd, ReadyCmd: t.ReadyCmd}), nil
}

// pruneReady drops the ready snapshots of builds no tag points at any more
// (deleted templates, builds a rebuild replaced); snapshots a sandbox runs
// from keep their data until it ends.
func (a *app) pruneReady() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	held, err := a.backend.SnapshotIDs()
	if err == nil {
		var n int
		n, err = a.templates.PruneReadySnapshots(ctx, held, a.backend.DeleteSnapshot)
		if n > 0 {
			a.log.Info("dropped ready snapshots of replaced or deleted template builds", "count", n)
		}
	}
	if err != nil {
		a.log.Warn("prune ready snapshots", "err", err)
	}
}
