package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Trees built by earlier Cubby versions stay usable: <dir>/<id>/current is a
// symlink to <dir>/<id>/<tree>/, which holds rootfs/ and template.json (an
// Info with ID, name, aliases, digest, user, workdir, env). They are read
// here, never written or removed (a templates directory may be shared with
// servers of the earlier version); a build of the same name supersedes them.
const (
	legacyCurrent = "current"
	legacyInfo    = "template.json"
)

// legacyRead loads the current tree of legacy template id.
func (m *Manager) legacyRead(id string) (Info, error) {
	if len(id) != IDLength || strings.ContainsAny(id, "./") {
		return Info{}, fmt.Errorf("template %s: %w", id, ErrNotFound)
	}
	tree, err := os.Readlink(filepath.Join(m.dir, id, legacyCurrent))
	if errors.Is(err, fs.ErrNotExist) {
		return Info{}, fmt.Errorf("template %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Info{}, err
	}
	treeDir := filepath.Join(m.dir, id, tree)
	data, err := os.ReadFile(filepath.Join(treeDir, legacyInfo))
	if err != nil {
		return Info{}, fmt.Errorf("template %s: %w", id, err)
	}
	var info Info
	if err := json.Unmarshal(data, &info); err != nil {
		return Info{}, fmt.Errorf("template %s: %s: %w", id, legacyInfo, err)
	}
	info.RootfsDir = filepath.Join(treeDir, "rootfs")
	info.BuildID, info.Tag, info.Tags, info.Shippable = tree, "", nil, false
	return info, nil
}

// legacyList returns every legacy template with a current tree.
func (m *Manager) legacyList() ([]Info, error) {
	entries, err := os.ReadDir(m.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // nothing built yet: a first start
	}
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	var out []Info
	for _, e := range entries {
		if !e.IsDir() || len(e.Name()) != IDLength {
			continue
		}
		info, err := m.legacyRead(e.Name())
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// legacyGet resolves an ID, name or alias among legacy templates.
func (m *Manager) legacyGet(idOrAlias string) (Info, error) {
	for _, id := range []string{idOrAlias, IDFor(idOrAlias)} {
		if info, err := m.legacyRead(id); err == nil || !errors.Is(err, ErrNotFound) {
			return info, err
		}
	}
	all, err := m.legacyList()
	if err != nil {
		return Info{}, err
	}
	for _, info := range all {
		if slices.Contains(info.Aliases, idOrAlias) {
			return info, nil
		}
	}
	return Info{}, fmt.Errorf("template %q: %w", idOrAlias, ErrNotFound)
}
