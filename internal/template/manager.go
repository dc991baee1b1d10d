package template

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubby-dev/cubby/internal/image"
)

// ErrNotFound is wrapped by lookups of an unknown template ID, name, alias or tag.
var ErrNotFound = errors.New("template not found")

// ErrReadOnly is wrapped when changing a template built by an earlier Cubby
// version (see legacy.go): rebuild it to manage it.
var ErrReadOnly = errors.New("template was built by an earlier Cubby version and is read-only; rebuild it")

// ErrAliasTaken is wrapped when a name or alias already names another template.
var ErrAliasTaken = errors.New("template alias already in use")

// DefaultTag is the tag a build gets when it asks for none, and the tag a
// reference without ":tag" resolves to (E2B template tags).
const DefaultTag = "default"

// Info describes one built template: a build of it, reached by a tag.
type Info struct {
	ID        string            `json:"id"`      // IDFor(Name)
	Name      string            `json:"name"`    // primary name
	Aliases   []string          `json:"aliases"` // Name first, then further aliases
	Tag       string            `json:"tag"`     // the tag this Info was resolved through ("" for legacy trees)
	Tags      []string          `json:"tags"`    // every tag pointing at this build
	BuildID   string            `json:"buildID"` // build identifier (UUID); legacy: the tree digest
	Digest    string            `json:"digest"`  // OCI manifest digest ("sha256:…"); legacy: the definition digest
	RootfsDir string            `json:"rootfsDir"`
	BuiltAt   time.Time         `json:"builtAt"`
	SizeBytes int64             `json:"sizeBytes"` // disk usage of the rootfs tree
	User      string            `json:"user"`      // default user of sandboxes (docs/wire/envd.md §3.6)
	Workdir   string            `json:"workdir"`   // default working directory
	Env       map[string]string `json:"env,omitempty"`
	StartCmd  string            `json:"startCmd,omitempty"`
	ReadyCmd  string            `json:"readyCmd,omitempty"`
	Runtime   string            `json:"runtime,omitempty"` // "runc", "runsc" or "" (server default)
	Public    bool              `json:"public"`
	// Team owns the template ("" for built-ins and templates built on the
	// host with `cubby template build`: every team may use them, none
	// change them through the API).
	Team     string `json:"team,omitempty"`
	CPUCount int    `json:"cpuCount,omitempty"`
	MemoryMB int    `json:"memoryMB,omitempty"`
	// Shippable reports that every layer of the tree is in the OCI layout
	// (false for legacy trees and builds on top of them).
	Shippable bool `json:"shippable"`
	// Snapshot is the build's ready snapshot (backend snapshot ID, see
	// ReadySnapshots): sandboxes of the template restore it, the start
	// command running, under SnapshotRuntime. "" = none: they run the start
	// command at create.
	Snapshot        string `json:"snapshot,omitempty"`
	SnapshotRuntime string `json:"snapshotRuntime,omitempty"`
	// Packages lists the Debian packages of a legacy tree's definition.
	Packages []string `json:"packages,omitempty"`
}

// Manager stores built templates under one directory:
//
//	<dir>/oci/               OCI image layout: every layer, config and manifest by digest;
//	                         index.json names each template build (see refs.go)
//	<dir>/trees/<chain>/     immutable rootfs trees, named by the OCI chain ID of their layers
//	<dir>/trees/.staging/    trees being made (removed on failure and by Prune)
//	<dir>/cache/<key>.json   build step cache: step inputs -> resulting layer
//	<dir>/.locks/            flocks serialising builds of one template and Prune
//	<dir>/<id>/current       trees of earlier Cubby versions (read only, see legacy.go)
//
// A Manager is safe for concurrent use, also by several processes sharing dir.
type Manager struct {
	dir   string
	log   *slog.Logger
	store *image.Store

	mu      sync.Mutex
	configs map[v1.Hash]v1.ConfigFile // manifest digest -> config (immutable content)
}

// NewManager returns a Manager storing templates under dir. Nothing is
// written there until a build (or a tag change): a directory shared with
// other servers is only read. A nil log discards log output.
func NewManager(dir string, log *slog.Logger) (*Manager, error) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st, err := image.OpenStore(filepath.Join(dir, "oci"))
	if err != nil {
		return nil, err
	}
	return &Manager{dir: dir, log: log, store: st, configs: map[v1.Hash]v1.ConfigFile{}}, nil
}

// Dir is the templates directory.
func (m *Manager) Dir() string { return m.dir }

// Store is the OCI layout holding every blob.
func (m *Manager) Store() *image.Store { return m.store }

// treeDir is where the tree with chain ID chain lives.
func (m *Manager) treeDir(chain v1.Hash) string {
	return filepath.Join(m.dir, "trees", chain.Hex)
}

func (m *Manager) stagingDir() string { return filepath.Join(m.dir, "trees", ".staging") }

// Get returns the template build ref names: an ID, name or alias, with an
// optional ":tag" (default: the "default" tag, else the newest build).
// Errors wrap ErrNotFound.
func (m *Manager) Get(ref string) (Info, error) {
	name, tag, _ := strings.Cut(ref, ":")
	if !nameRe.MatchString(name) || (tag != "" && !tagRe.MatchString(tag)) {
		return Info{}, fmt.Errorf("template %q: %w", ref, ErrNotFound)
	}
	builds, err := m.builds()
	if err != nil {
		return Info{}, err
	}
	var match []Info
	for _, b := range builds {
		if b.ID == name || slices.Contains(b.Aliases, name) {
			match = append(match, b)
		}
	}
	if len(match) > 0 {
		if info, ok := pickTag(match, tag); ok {
			return info, nil
		}
		return Info{}, fmt.Errorf("template %q has no tag %q: %w", name, tag, ErrNotFound)
	}
	if tag == "" || tag == DefaultTag {
		if info, err := m.legacyGet(name); err == nil {
			return info, nil
		} else if !errors.Is(err, ErrNotFound) {
			return Info{}, err
		}
	}
	return Info{}, fmt.Errorf("template %q: %w", ref, ErrNotFound)
}

// VisibleTo reports whether team may use the template: its own, public
// ones and those no team owns (built-ins).
func (i Info) VisibleTo(team string) bool { return i.Team == "" || i.Public || i.Team == team }

// pickTag chooses among builds of one template: the given tag; without a
// tag the default tag, else the newest build.
func pickTag(builds []Info, tag string) (Info, bool) {
	want := tag
	if want == "" {
		want = DefaultTag
	}
	for _, b := range builds {
		if b.Tag == want {
			return b, true
		}
	}
	if tag != "" {
		return Info{}, false
	}
	newest := builds[0]
	for _, b := range builds[1:] {
		if b.BuiltAt.After(newest.BuiltAt) {
			newest = b
		}
	}
	return newest, true
}

// List returns one Info per template (as Get(id) resolves it), sorted by name.
func (m *Manager) List() ([]Info, error) {
	builds, err := m.builds()
	if err != nil {
		return nil, err
	}
	byID := map[string][]Info{}
	for _, b := range builds {
		byID[b.ID] = append(byID[b.ID], b)
	}
	var out []Info
	for _, bs := range byID {
		info, _ := pickTag(bs, "")
		out = append(out, info)
	}
	legacy, err := m.legacyList()
	if err != nil {
		return nil, err
	}
	for _, l := range legacy {
		if _, ok := byID[l.ID]; !ok {
			out = append(out, l)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Builds returns every tagged build of template id (an ID, name or alias),
// one Info per tag, newest first. Errors wrap ErrNotFound.
func (m *Manager) Builds(idOrName string) ([]Info, error) {
	builds, err := m.builds()
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, b := range builds {
		if b.ID == idOrName || slices.Contains(b.Aliases, idOrName) {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		if l, err := m.legacyGet(idOrName); err == nil {
			return []Info{l}, nil
		}
		return nil, fmt.Errorf("template %q: %w", idOrName, ErrNotFound)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].BuiltAt.After(out[j].BuiltAt) })
	return out, nil
}

// lockTemplate serialises builds (and tag changes) of template id.
func (m *Manager) lockTemplate(ctx context.Context, id string) (func(), error) {
	return m.lock(ctx, "template-"+id)
}
