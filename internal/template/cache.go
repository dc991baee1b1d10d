package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cubby-dev/cubby/internal/image"
)

// recipeVersion names how steps are run and layers made. It is part of every
// step's cache key, so changing the recipe invalidates cached steps.
const recipeVersion = "cubby-build/v1"

// cacheEntry is the cached result of one step: the layer it made (nil when
// it changed nothing).
type cacheEntry struct {
	Layer   *image.Layer `json:"layer,omitempty"`
	Created time.Time    `json:"created"`
}

// stepKey is the cache key of a step: a sha256 over everything that
// determines its result — the tree it runs on, the user, working directory
// and environment it runs with, and the step's own inputs.
func (r *run) stepKey(inputs ...string) string {
	b, _ := json.Marshal(struct {
		Recipe  string   `json:"recipe"`
		Parent  string   `json:"parent"`
		User    string   `json:"user"`
		Workdir string   `json:"workdir"`
		Env     []string `json:"env"`
		Inputs  []string `json:"inputs"`
	}{recipeVersion, r.st.chain.String(), r.st.user, r.st.workdir, r.st.envList(), inputs})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (m *Manager) cachePath(key string) string {
	return filepath.Join(m.dir, "cache", key+".json")
}

// cacheGet returns the cached result of key when it (and its layer blob) exists.
func (m *Manager) cacheGet(key string) (cacheEntry, bool) {
	data, err := os.ReadFile(m.cachePath(key))
	if err != nil {
		return cacheEntry{}, false
	}
	var e cacheEntry
	if json.Unmarshal(data, &e) != nil || (e.Layer != nil && !m.store.Has(e.Layer.Digest)) {
		return cacheEntry{}, false
	}
	return e, true
}

func (m *Manager) cachePut(key string, e cacheEntry) error {
	e.Created = time.Now().UTC()
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(m.cachePath(key)), 0o755); err != nil {
		return fmt.Errorf("cache step: %w", err)
	}
	tmp := m.cachePath(key) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("cache step: %w", err)
	}
	return os.Rename(tmp, m.cachePath(key))
}

// cacheEntries lists every cache key with its entry.
func (m *Manager) cacheEntries() (map[string]cacheEntry, error) {
	entries, err := os.ReadDir(filepath.Join(m.dir, "cache"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]cacheEntry{}
	for _, e := range entries {
		name := e.Name()
		if filepath.Ext(name) != ".json" {
			continue
		}
		var ce cacheEntry
		if data, err := os.ReadFile(filepath.Join(m.dir, "cache", name)); err == nil && json.Unmarshal(data, &ce) == nil {
			out[name[:len(name)-len(".json")]] = ce
		}
	}
	return out, nil
}

// humanBytes renders a size for build logs ("12.3 KiB", "4.5 MiB").
func humanBytes(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// cached runs a layer-making step through the cache: unless forced, a
// cached result for key is reused (its tree rebuilt from the stored layer
// if it was pruned); otherwise produce writes the step's layer.
func (r *run) cached(ctx context.Context, step, what, key string, force bool, produce func(io.Writer) error) error {
	if !force && !r.req.Spec.Force {
		if e, ok := r.b.m.cacheGet(key); ok {
			if e.Layer != nil {
				next, err := r.b.m.applyStored(ctx, r.st, *e.Layer)
				if err != nil {
					return err
				}
				r.st = next
			}
			r.logf(LevelInfo, step, "CACHED %s", what)
			return nil
		}
	}
	began := time.Now()
	next, changed, err := r.b.m.extend(ctx, r.st, produce)
	if err != nil {
		return err
	}
	e := cacheEntry{}
	if changed {
		l := next.layers[len(next.layers)-1]
		e.Layer = &l
		r.logf(LevelInfo, step, "Layer %s (%s) in %s", l.Digest.Hex[:12], humanBytes(l.Size), time.Since(began).Round(100*time.Millisecond))
	} else {
		r.logf(LevelInfo, step, "No changes")
	}
	if err := r.b.m.cachePut(key, e); err != nil {
		r.b.log.Warn("step not cached", "err", err)
	}
	r.st = next
	return nil
}
