package template

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubby-dev/cubby/internal/image"
	"golang.org/x/sys/unix"
)

// PruneResult says what Prune removed (minAge: anything changed more
// recently is kept, so a failed build's cached steps serve the next attempt).
type PruneResult struct {
	Trees []string // removed tree directories
	Blobs int      // removed blobs
	Steps int      // removed step cache entries
}

// Prune removes what no template uses any more: trees that are neither a
// tagged build's tree, nor an intermediate tree of one (kept for fast
// rebuilds), nor in inUse (keys: RootfsDir values of sandboxes running or
// paused on this host); step cache entries whose layer lies on no kept
// chain; blobs nothing kept refers to; staging trees of dead builds. Trees
// of legacy templates are never removed. It waits for running builds to
// finish and blocks new ones meanwhile: callers run it in the background.
//
// inUse only knows this host's sandboxes: with a templates directory shared
// by several servers, run Prune where the sandboxes of every server are
// known, or not at all.
func (m *Manager) Prune(ctx context.Context, inUse map[string]bool, minAge time.Duration) (PruneResult, error) {
	if _, err := os.Stat(filepath.Join(m.dir, "trees")); errors.Is(err, fs.ErrNotExist) {
		return PruneResult{}, nil // nothing built here: leave the directory untouched
	}
	unlock, err := m.flock(ctx, gcLock, unix.LOCK_EX)
	if err != nil {
		return PruneResult{}, err
	}
	defer unlock()
	keep, err := m.roots()
	if err != nil {
		return PruneResult{}, err
	}
	keep.after = time.Now().Add(-minAge)
	var res PruneResult
	var errs []error
	errs = append(errs, m.pruneTrees(keep, inUse, &res))
	errs = append(errs, m.pruneCache(keep, &res))
	errs = append(errs, m.pruneBlobs(keep, &res))
	errs = append(errs, removeTree(m.stagingDir()))
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("prune templates: %w", err)
	}
	return res, nil
}

// gcRoots are what Prune keeps.
type gcRoots struct {
	chains map[string]bool // tree chain IDs (hex): every prefix of every tagged build
	blobs  map[v1.Hash]bool
	after  time.Time // anything changed after it is kept too
}

// recent reports whether path changed after keep.after (or cannot be stat'ed).
func (k gcRoots) recent(path string) bool {
	fi, err := os.Lstat(path)
	return err != nil || fi.ModTime().After(k.after)
}

// roots collects the chains and blobs of every tagged build.
func (m *Manager) roots() (gcRoots, error) {
	keep := gcRoots{chains: map[string]bool{}, blobs: map[v1.Hash]bool{}}
	idx, err := m.store.Index()
	if err != nil {
		return keep, err
	}
	for _, d := range idx.Manifests {
		keep.chains[d.Annotations[annTree]] = true
		keep.blobs[d.Digest] = true
		var man v1.Manifest
		if err := m.store.ReadJSON(d.Digest, &man); err != nil {
			return keep, err
		}
		keep.blobs[man.Config.Digest] = true
		var cfg v1.ConfigFile
		if err := m.store.ReadJSON(man.Config.Digest, &cfg); err != nil {
			return keep, err
		}
		for i, l := range man.Layers {
			keep.blobs[l.Digest] = true
			if cfg.Config.Labels[labelShippable] != "false" {
				keep.chains[image.ChainID(cfg.RootFS.DiffIDs[:i+1]).Hex] = true
			}
		}
	}
	return keep, nil
}

func (m *Manager) pruneTrees(keep gcRoots, inUse map[string]bool, res *PruneResult) error {
	entries, err := os.ReadDir(filepath.Join(m.dir, "trees"))
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		p := filepath.Join(m.dir, "trees", e.Name())
		if strings.HasPrefix(e.Name(), ".") || keep.chains[e.Name()] || inUse[p] || keep.recent(p) {
			continue
		}
		if err := removeTree(p); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Trees = append(res.Trees, p)
	}
	return errors.Join(errs...)
}

// pruneCache drops step cache entries whose result is not on a kept chain
// (their layers go with them) and records the layers of the others as kept.
func (m *Manager) pruneCache(keep gcRoots, res *PruneResult) error {
	entries, err := m.cacheEntries()
	if err != nil {
		return err
	}
	for key, e := range entries {
		if e.Layer != nil && keep.blobs[e.Layer.Digest] {
			continue
		}
		if keep.recent(m.cachePath(key)) {
			if e.Layer != nil {
				keep.blobs[e.Layer.Digest] = true
			}
			continue
		}
		if err := os.Remove(m.cachePath(key)); err == nil {
			res.Steps++
		}
	}
	return nil
}

func (m *Manager) pruneBlobs(keep gcRoots, res *PruneResult) error {
	blobs, err := m.store.Blobs()
	if err != nil {
		return err
	}
	var errs []error
	for _, b := range blobs {
		if keep.blobs[b] || keep.recent(m.store.BlobPath(b)) {
			continue
		}
		if err := m.store.Remove(b); err != nil {
			errs = append(errs, err)
			continue
		}
		res.Blobs++
	}
	return errors.Join(errs...)
}
