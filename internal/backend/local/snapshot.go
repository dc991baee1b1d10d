package local

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/atomicfile"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/sandboxid"
)

// Snapshots live in Config.SnapshotDir, one directory each:
//
//	<SnapshotDir>/<snapID>/disk.img       the source's disk, captured (sparse)
//	<SnapshotDir>/<snapID>/mnt/           disk.img mounted ro,nosuid,nodev while used
//	<SnapshotDir>/<snapID>/checkpoint/    the runtime's memory image (full snapshots; read-only, shared by every restore)
//	<SnapshotDir>/<snapID>/agent          the agent binary the memory image runs (full snapshots; a hard link when it can)
//	<SnapshotDir>/<snapID>/snapshot.json  snapshotRecord
//	<SnapshotDir>/.tmp-<snapID>/          a capture in progress (removed at start)
//
// A sandbox started from a snapshot gets an empty disk of its own over the
// snapshot's layers (its captured disk and those of the snapshots its source
// was started from) and the template: N sandboxes from one snapshot share its
// data copy-on-write (overlayfs copy-up), and a snapshot costs only what its
// source wrote.
const (
	snapshotFile      = "snapshot.json"
	snapshotImage     = "checkpoint"
	snapshotAgent     = "agent"
	snapshotMnt       = "mnt"
	snapshotTmp       = ".tmp-"
	maxSnapshotLayers = 32 // overlay lower layers a sandbox may stack (mount options fit a page)
)

// snapshotRecord is a snapshot's snapshot.json.
type snapshotRecord struct {
	ID        string               `json:"id"`
	Lower     string               `json:"lower"`  // the template tree
	Layers    []rootfs.Layer       `json:"layers"` // its own captured disk first, then its source's layers
	Runtime   string               `json:"runtime"`
	Mode      backend.SnapshotMode `json:"mode"`
	SizeBytes int64                `json:"sizeBytes"`
	CreatedAt time.Time            `json:"createdAt"`
	Deleted   bool                 `json:"deleted,omitempty"` // kept only while something uses its layer
	// AgentToken is the credential the captured agent accepts (the source's
	// agentapi.InitRequest.AccessToken, "" when unsecured): a sandbox restored
	// from a full snapshot is re-initialised with it. It is in the memory
	// image anyway (same directory, same permissions).
	AgentToken string `json:"agentToken,omitempty"`
	// Volumes are the mount paths of the source's volumes; a full snapshot
	// restores only with volumes at the same paths.
	Volumes []string `json:"volumes,omitempty"`
	// Agent is the agent binary of a full snapshot (its copy in the
	// snapshot's directory): sandboxes restored from it run that one, not
	// the server's current one (an upgrade would otherwise change the code
	// under the restored memory).
	Agent string `json:"agent,omitempty"`
}

// full reports whether rec holds memory and processes.
func (rec snapshotRecord) full() bool { return rec.Mode == backend.SnapshotFull }

func (b *Backend) snapshotDir(id string) string { return filepath.Join(b.cfg.SnapshotDir, id) }

// Snapshot implements backend.Backend: the disk of the running sandbox is
// captured into a staging directory with its filesystem frozen for the copy
// (rootfs.Capture), described, and renamed into place.
func (b *Backend) Snapshot(ctx context.Context, id, snapID string) (backend.Snapshot, error) {
	if !sandboxid.Valid(snapID) {
		return backend.Snapshot{}, fmt.Errorf("snapshot id %q: want [a-z0-9]{1,63}", snapID)
	}
	s, err := b.lockRunning(id, "snapshot")
	if err != nil {
		return backend.Snapshot{}, err
	}
	defer s.mu.Unlock()
	if len(s.Layers) >= maxSnapshotLayers {
		return backend.Snapshot{}, fmt.Errorf("snapshot %s: %w (%d layers)", id, backend.ErrTooDeep, len(s.Layers))
	}
	final := b.snapshotDir(snapID)
	if _, err := os.Stat(final); err == nil {
		return backend.Snapshot{}, fmt.Errorf("snapshot %s: %s exists", id, snapID)
	}
	staging := filepath.Join(b.cfg.SnapshotDir, snapshotTmp+snapID)
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return backend.Snapshot{}, fmt.Errorf("snapshot %s: %w", id, err)
	}
	rec, paused, err := b.capture(ctx, s, staging, final, snapID)
	if err != nil {
		_ = os.RemoveAll(staging)
		return backend.Snapshot{}, fmt.Errorf("snapshot %s: %w", id, err)
	}
	b.log.Info("sandbox snapshotted", "sandbox", id, "snapshot", snapID, "bytes", rec.SizeBytes, "paused", paused)
	s.out.Note(slog.LevelInfo, "sandbox snapshotted", "snapshot", snapID, "paused", paused.String())
	return backend.Snapshot{ID: snapID, Mode: rec.Mode, SizeBytes: rec.SizeBytes, Paused: paused}, nil
}

// capture copies s's disk into staging (and, under a runtime that can
// checkpoint a running container, its memory image, taken in the same pause),
// writes its record there and renames staging to final: the snapshot exists
// complete or not at all.
func (b *Backend) capture(ctx context.Context, s *sandbox, staging, final, snapID string) (snapshotRecord, time.Duration, error) {
	rec := snapshotRecord{ID: snapID, Lower: s.Lower, Runtime: s.Runtime, Mode: backend.SnapshotFilesystem}
	paused, err := b.captureState(ctx, s, staging, &rec)
	if err != nil {
		return snapshotRecord{}, paused, err
	}
	size, err := allocatedTree(staging)
	if err != nil {
		return snapshotRecord{}, paused, err
	}
	own := rootfs.Layer{Image: filepath.Join(final, rootfs.ImageName), Mount: filepath.Join(final, snapshotMnt)}
	rec.Layers, rec.SizeBytes, rec.CreatedAt = append([]rootfs.Layer{own}, s.Layers...), size, time.Now().UTC()
	if err := writeFileSync(filepath.Join(staging, snapshotFile), rec); err != nil {
		return snapshotRecord{}, paused, err
	}
	if err := os.Rename(staging, final); err != nil {
		return snapshotRecord{}, paused, fmt.Errorf("commit snapshot: %w", err)
	}
	if err := atomicfile.SyncDir(b.cfg.SnapshotDir); err != nil {
		return snapshotRecord{}, paused, err
	}
	return rec, paused, nil
}

// captureState writes s's disk (and memory image when the runtime can) into
// staging and returns how long s was held. A filesystem capture drops the
// agent's state (its credential, env vars and kernel logs); a full one keeps
// it, as the memory it matches does (the agent is re-initialised with the new
// sandbox's own at restore).
func (b *Backend) captureState(ctx context.Context, s *sandbox, staging string, rec *snapshotRecord) (time.Duration, error) {
	img := filepath.Join(staging, rootfs.ImageName)
	rt, err := b.runtimeFor(s.Runtime)
	if err != nil {
		return 0, err
	}
	sn, ok := rt.(runtime.Snapshotter)
	if !ok || s.MemoryHeldToken {
		return b.rootfs.Capture(ctx, b.disk(s), img, []string{agentapi.StateDir})
	}
	if err := pinFile(cmp.Or(s.Agent, b.cfg.AgentBinary), filepath.Join(staging, snapshotAgent)); err != nil {
		return 0, fmt.Errorf("keep the agent binary: %w", err)
	}
	paused, err := sn.CheckpointRunning(ctx, s.ID, filepath.Join(staging, snapshotImage), func() error {
		_, err := b.rootfs.CopyFrozen(ctx, b.disk(s), img)
		return err
	})
	if err == nil {
		err = b.rootfs.Finish(ctx, img, nil)
	}
	if err != nil {
		return paused, err
	}
	rec.Mode, rec.AgentToken, rec.Volumes = backend.SnapshotFull, s.agentToken(), volumePaths(s.Volumes)
	rec.Agent = filepath.Join(b.snapshotDir(rec.ID), snapshotAgent)
	return paused, nil
}

// pinFile makes dst a hard link to src, or a read-only copy of it when they
// are on different filesystems.
func pinFile(src, dst string) error {
	err := os.Link(src, dst)
	if !errors.Is(err, unix.EXDEV) {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o555)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	return errors.Join(err, out.Close())
}

// allocatedTree is the disk space (allocated blocks) of the files below dir
// that are its own: hard links (the agent binary pinned by a link) are
// shared and not counted.
func allocatedTree(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Nlink == 1 {
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", dir, err)
	}
	return total, nil
}

// writeFileSync replaces path with v as JSON, flushed to disk.
func writeFileSync(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	return atomicfile.Write(path, data, 0o600)
}

// loadSnapshot reads the record of snapshot snapID.
func (b *Backend) loadSnapshot(snapID string) (snapshotRecord, error) {
	var rec snapshotRecord
	if !sandboxid.Valid(snapID) {
		return rec, fmt.Errorf("snapshot %q: %w", snapID, backend.ErrSnapshotNotFound)
	}
	data, err := os.ReadFile(filepath.Join(b.snapshotDir(snapID), snapshotFile))
	if errors.Is(err, os.ErrNotExist) {
		return rec, fmt.Errorf("snapshot %s: %w", snapID, backend.ErrSnapshotNotFound)
	}
	if err != nil {
		return rec, fmt.Errorf("read snapshot %s: %w", snapID, err)
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, fmt.Errorf("decode snapshot %s: %w", snapID, err)
	}
	return rec, nil
}

// useSnapshot gives the new sandbox s the layers of snapshot snapID, records
// that s uses them, so they are not collected under it, and returns the
// snapshot's record.
func (b *Backend) useSnapshot(s *sandbox, snapID string) (snapshotRecord, error) {
	b.snapMu.Lock()
	defer b.snapMu.Unlock()
	rec, err := b.loadSnapshot(snapID)
	if err == nil && rec.Deleted {
		err = fmt.Errorf("snapshot %s: %w", snapID, backend.ErrSnapshotNotFound)
	}
	if err != nil {
		return rec, err
	}
	if rec.full() && (rec.Runtime != s.Runtime || !slices.Equal(rec.Volumes, volumePaths(s.Volumes))) {
		return rec, fmt.Errorf("snapshot %s holds the memory of a %s sandbox with volumes at %q: "+
			"start it under %s with volumes at the same paths: %w", snapID, rec.Runtime, rec.Volumes, rec.Runtime, backend.ErrInvalid)
	}
	s.Lower, s.Layers, s.Agent = rec.Lower, rec.Layers, rec.Agent
	b.layerUsers[s.ID] = rec.Layers
	return rec, nil
}

// volumePaths are the mount paths of mounts, in order.
func volumePaths(mounts []backend.VolumeMount) []string {
	var out []string
	for _, v := range mounts {
		out = append(out, v.Path)
	}
	return out
}

// useLayers records the layers of an adopted or created sandbox s.
func (b *Backend) useLayers(s *sandbox) {
	if len(s.Layers) == 0 {
		return
	}
	b.snapMu.Lock()
	b.layerUsers[s.ID] = s.Layers
	b.snapMu.Unlock()
}

// dropLayers forgets sandbox id's use of layers and collects what is unused.
func (b *Backend) dropLayers(ctx context.Context, id string) {
	b.snapMu.Lock()
	_, had := b.layerUsers[id]
	delete(b.layerUsers, id)
	b.snapMu.Unlock()
	if had {
		b.collectSnapshots(ctx)
	}
}

// DeleteSnapshot implements backend.Backend.
func (b *Backend) DeleteSnapshot(ctx context.Context, snapID string) error {
	if err := b.markDeleted(snapID); err != nil {
		return err
	}
	b.collectSnapshots(ctx)
	return nil
}

func (b *Backend) markDeleted(snapID string) error {
	b.snapMu.Lock()
	defer b.snapMu.Unlock()
	rec, err := b.loadSnapshot(snapID)
	if errors.Is(err, backend.ErrSnapshotNotFound) || err == nil && rec.Deleted {
		return nil
	}
	if err != nil {
		return err
	}
	rec.Deleted = true
	return writeFileSync(filepath.Join(b.snapshotDir(snapID), snapshotFile), rec)
}

// PruneSnapshots implements backend.Backend.
func (b *Backend) PruneSnapshots(ctx context.Context, known []string) error {
	keep := map[string]bool{}
	for _, id := range known {
		keep[id] = true
	}
	entries, err := os.ReadDir(b.cfg.SnapshotDir)
	if err != nil {
		return fmt.Errorf("prune snapshots: %w", err)
	}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, snapshotTmp):
			errs = append(errs, os.RemoveAll(filepath.Join(b.cfg.SnapshotDir, name)))
		case !keep[name]:
			errs = append(errs, b.markDeleted(name))
		}
	}
	b.collectSnapshots(ctx)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("prune snapshots: %w", err)
	}
	return nil
}

// collectSnapshots removes every deleted snapshot whose captured disk no
// sandbox and no live snapshot stacks any more.
func (b *Backend) collectSnapshots(ctx context.Context) {
	b.snapMu.Lock()
	defer b.snapMu.Unlock()
	entries, err := os.ReadDir(b.cfg.SnapshotDir)
	if err != nil {
		b.log.Warn("collect snapshots", "err", err)
		return
	}
	used := map[string]bool{}
	for _, layers := range b.layerUsers {
		markUsed(used, layers)
	}
	var deleted []snapshotRecord
	for _, e := range entries {
		rec, err := b.loadSnapshot(e.Name())
		switch {
		case err != nil:
			continue
		case rec.Deleted:
			deleted = append(deleted, rec)
		default:
			markUsed(used, rec.Layers)
		}
	}
	for _, rec := range deleted {
		if used[rec.Layers[0].Image] {
			continue
		}
		if err := b.removeSnapshot(ctx, rec); err != nil {
			b.log.Warn("remove deleted snapshot", "snapshot", rec.ID, "err", err)
		}
	}
}

// snapshotLowers returns the template trees of the snapshots on disk,
// deleted ones included (kept while a sandbox stacks their layer).
func (b *Backend) snapshotLowers() map[string]bool {
	b.snapMu.Lock()
	defer b.snapMu.Unlock()
	out := map[string]bool{}
	entries, err := os.ReadDir(b.cfg.SnapshotDir)
	if err != nil {
		return out
	}
	for _, e := range entries {
		if rec, err := b.loadSnapshot(e.Name()); err == nil {
			out[rec.Lower] = true
		}
	}
	return out
}

func markUsed(used map[string]bool, layers []rootfs.Layer) {
	for _, l := range layers {
		used[l.Image] = true
	}
}

// removeSnapshot unmounts a snapshot's captured disk and removes its directory.
func (b *Backend) removeSnapshot(ctx context.Context, rec snapshotRecord) error {
	if err := b.rootfs.ReleaseLayer(ctx, rec.Layers[0]); err != nil {
		return err
	}
	if err := os.RemoveAll(b.snapshotDir(rec.ID)); err != nil {
		return err
	}
	b.log.Info("snapshot removed", "snapshot", rec.ID)
	return nil
}

// SnapshotIDs lists the snapshots the backend holds and has not deleted
// (deleted ones whose data a sandbox still stacks are left out). Errors:
// the snapshot directory's.
func (b *Backend) SnapshotIDs() ([]string, error) {
	b.snapMu.Lock()
	defer b.snapMu.Unlock()
	entries, err := os.ReadDir(b.cfg.SnapshotDir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []string
	for _, e := range entries {
		if rec, err := b.loadSnapshot(e.Name()); err == nil && !rec.Deleted {
			out = append(out, rec.ID)
		}
	}
	return out, nil
}
