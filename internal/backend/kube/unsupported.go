package kube

import (
	"context"
	"fmt"
	"os"

	"github.com/cubby-dev/cubby/internal/backend"
)

// What the kubernetes backend does not do (docs/kubernetes.md, "What differs
// per backend"): snapshots and forks (a sandbox's disk is the Pod's ephemeral
// container layer, which no Kubernetes API captures), volumes (a host-side
// ext4 image per volume, mounted into sandboxes and served by the volume
// content API, has no counterpart across nodes here), a template's start
// command and a host CA bundle file (both from templates-from-code and
// --sandbox-outbound, single-host features). Each answers a wrapped
// backend.ErrNotSupported, which the control plane turns into 501; nothing is
// created or kept.

// unsupported wraps backend.ErrNotSupported with what was asked and why.
func unsupported(what, why string) error {
	return fmt.Errorf("%s on the kubernetes backend: %s: %w", what, why, backend.ErrNotSupported)
}

// errNoSnapshots is what every snapshot operation answers.
var errNoSnapshots = unsupported("snapshots and forks", "a Pod's filesystem cannot be captured through the Kubernetes API")

// errNoVolumes is what every volume operation answers.
var errNoVolumes = unsupported("volumes", "volumes are host disk images of the single-host backend")

// checkCreate refuses the parts of a create request this backend cannot honour.
func checkCreate(req backend.CreateRequest) error {
	switch {
	case req.Snapshot != "":
		return errNoSnapshots
	case len(req.Volumes) > 0:
		return errNoVolumes
	case req.Start != nil:
		return unsupported("a template start command", "templates here are the images given with --template-image")
	case req.CABundle != "":
		return unsupported("--sandbox-outbound", "a host CA bundle file cannot be mounted into a Pod")
	}
	return nil
}

// Snapshot implements backend.Backend: backend.ErrNotSupported.
func (b *Backend) Snapshot(context.Context, string, string) (backend.Snapshot, error) {
	return backend.Snapshot{}, errNoSnapshots
}

// DeleteSnapshot implements backend.Backend: backend.ErrNotSupported.
func (b *Backend) DeleteSnapshot(context.Context, string) error { return errNoSnapshots }

// PruneSnapshots implements backend.Backend. The backend holds no snapshots,
// so none is left to prune: nil.
func (b *Backend) PruneSnapshots(context.Context, []string) error { return nil }

// CreateVolume implements backend.Backend: backend.ErrNotSupported.
func (b *Backend) CreateVolume(context.Context, string, int64) error { return errNoVolumes }

// DeleteVolume implements backend.Backend: backend.ErrNotSupported.
func (b *Backend) DeleteVolume(context.Context, string) error { return errNoVolumes }

// OpenVolume implements backend.Backend: backend.ErrNotSupported.
func (b *Backend) OpenVolume(context.Context, string) (*os.Root, error) { return nil, errNoVolumes }

// PruneVolumes implements backend.Backend. The backend holds no volumes, so
// none is left to prune: nil.
func (b *Backend) PruneVolumes(context.Context, []string) error { return nil }

// CanHoldVolumes reports false: creates with volume mounts answer
// backend.ErrNotSupported before any volume is looked up.
func (b *Backend) CanHoldVolumes() bool { return false }
