package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/sandboxid"
)

// Volumes live in Config.VolumeDir, one directory each (rootfs.CreateVolume):
// an ext4 image per volume, its size the volume's quota, mounted on the host
// while the volume exists and bind-mounted (idmapped with user namespaces)
// into the sandboxes that mount it. The mount sits on a single host; a
// backend spanning hosts would put the same directory on a network
// filesystem.

func (b *Backend) volumeDir(id string) string { return filepath.Join(b.cfg.VolumeDir, id) }

// CreateVolume implements backend.Backend.
func (b *Backend) CreateVolume(ctx context.Context, id string, sizeBytes int64) error {
	if !sandboxid.Valid(id) {
		return fmt.Errorf("volume id %q: want [a-z0-9]{1,63}", id)
	}
	return b.rootfs.CreateVolume(ctx, b.volumeDir(id), sizeBytes)
}

// DeleteVolume implements backend.Backend.
func (b *Backend) DeleteVolume(ctx context.Context, id string) error {
	if !sandboxid.Valid(id) {
		return nil
	}
	b.volMu.Lock()
	defer b.volMu.Unlock()
	if user := b.volumeUser(id); user != "" {
		return fmt.Errorf("delete volume %s: %w (sandbox %s)", id, backend.ErrVolumeInUse, user)
	}
	return b.rootfs.ReleaseVolume(ctx, b.volumeDir(id))
}

// volumeUser returns a sandbox mounting volume id, or ""; b.volMu is held.
func (b *Backend) volumeUser(id string) string {
	for sb, vols := range b.volUsers {
		for _, v := range vols {
			if v.ID == id {
				return sb
			}
		}
	}
	return ""
}

// OpenVolume implements backend.Backend.
func (b *Backend) OpenVolume(_ context.Context, id string) (*os.Root, error) {
	dir := b.volumeDir(id)
	if _, err := os.Stat(filepath.Join(dir, rootfs.ImageName)); !sandboxid.Valid(id) || err != nil {
		return nil, fmt.Errorf("volume %s: %w", id, backend.ErrVolumeNotFound)
	}
	if err := b.rootfs.MountVolume(dir); err != nil {
		return nil, err
	}
	return os.OpenRoot(rootfs.VolumeData(dir))
}

// PruneVolumes implements backend.Backend.
func (b *Backend) PruneVolumes(ctx context.Context, known []string) error {
	keep := map[string]bool{}
	for _, id := range known {
		keep[id] = true
	}
	entries, err := os.ReadDir(b.cfg.VolumeDir)
	if err != nil {
		return fmt.Errorf("prune volumes: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if !keep[e.Name()] {
			errs = append(errs, b.DeleteVolume(ctx, e.Name()))
		}
	}
	return errors.Join(errs...)
}

// useVolumes checks that s's volumes exist, mounts them on the host and
// records that s uses them.
func (b *Backend) useVolumes(s *sandbox) error {
	b.volMu.Lock()
	defer b.volMu.Unlock()
	for _, v := range s.Volumes {
		dir := b.volumeDir(v.ID)
		if _, err := os.Stat(filepath.Join(dir, rootfs.ImageName)); !sandboxid.Valid(v.ID) || err != nil {
			return fmt.Errorf("volume %s: %w", v.ID, backend.ErrVolumeNotFound)
		}
		if err := b.rootfs.MountVolume(dir); err != nil {
			return err
		}
	}
	if len(s.Volumes) > 0 {
		b.volUsers[s.ID] = s.Volumes
	}
	return nil
}

// claimVolumes validates the volume mounts of the new sandbox s and claims
// them (useVolumes), pushing the release on undo.
func (b *Backend) claimVolumes(s *sandbox, mounts []backend.VolumeMount, undo *undoStack) error {
	seen := map[string]bool{}
	for _, v := range mounts {
		if why := backend.ValidVolumePath(v.Path); why != "" || seen[v.Path] {
			return fmt.Errorf("volume mount path %q: %s (or given twice)", v.Path, why)
		}
		seen[v.Path] = true
	}
	s.Volumes = mounts
	if err := b.useVolumes(s); err != nil {
		return err
	}
	undo.push(func() { _ = b.dropVolumes(s.ID) })
	return nil
}

// dropVolumes unmounts sandbox id's volume views and forgets its use of
// volumes (kept when a view stays mounted: the volume is then still in use).
func (b *Backend) dropVolumes(id string) error {
	b.volMu.Lock()
	defer b.volMu.Unlock()
	if err := rootfs.UnmountViews(filepath.Join(b.sandboxDir(id), "volumes")); err != nil {
		return err
	}
	delete(b.volUsers, id)
	return nil
}

// volumeMounts are the OCI bind mounts of s's volumes: nosuid, nodev, and,
// when s has a user namespace, idmapped through it, so the volume's files
// keep the ids the sandbox sees whatever its host range: by runc itself (its
// "idmap" option), else from a view the host idmapped (mountViews).
func (b *Backend) volumeMounts(s *sandbox) []specs.Mount {
	var out []specs.Mount
	for i, v := range s.Volumes {
		opts := []string{"rbind", "rw", "nosuid", "nodev"}
		src := rootfs.VolumeData(b.volumeDir(v.ID))
		switch {
		case s.IDs.IsZero():
		case s.Runtime == runcName:
			opts = append(opts, "idmap")
		default:
			src = b.volumeView(s.ID, i)
		}
		out = append(out, specs.Mount{Destination: v.Path, Type: "bind", Source: src, Options: opts})
	}
	return out
}

// runcName is the runtime that idmaps bind mounts itself.
const runcName = "runc"

// needsViews reports whether s's volumes are mounted through host views.
func needsViews(s *sandbox) bool {
	return !s.IDs.IsZero() && s.Runtime != runcName && len(s.Volumes) > 0
}

// volumeView is where the host view of sandbox id's i-th volume is mounted.
func (b *Backend) volumeView(id string, i int) string {
	return filepath.Join(b.sandboxDir(id), "volumes", strconv.Itoa(i))
}

// mountViews mounts the idmapped views of s's volumes (needsViews), its user
// namespace being in place.
func (b *Backend) mountViews(s *sandbox) error {
	if !needsViews(s) {
		return nil
	}
	for i, v := range s.Volumes {
		if err := b.rootfs.MountView(rootfs.VolumeData(b.volumeDir(v.ID)), b.volumeView(s.ID, i), b.usernsPath(s.ID)); err != nil {
			return err
		}
	}
	return nil
}
