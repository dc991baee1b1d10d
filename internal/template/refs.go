package template

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the OCI layout's index.json entries: one entry per
// (template, tag), pointing at the manifest of the tagged build.
const (
	annRefName = "org.opencontainers.image.ref.name" // "<name>:<tag>"
	annID      = "dev.cubby.template.id"
	annName    = "dev.cubby.template.name"
	annAliases = "dev.cubby.template.aliases" // comma-separated, name first
	annPublic  = "dev.cubby.template.public"  // "true" / "false"
	annTeam    = "dev.cubby.template.team"    // owning team; absent for built-ins
	annTag     = "dev.cubby.template.tag"
	annBuild   = "dev.cubby.build.id"
	annCreated = "dev.cubby.build.created" // RFC 3339, UTC
	annTree    = "dev.cubby.build.tree"    // chain ID of the rootfs tree
	annSize    = "dev.cubby.build.size"    // bytes of the tree
	annCPU     = "dev.cubby.build.cpu-count"
	annMemory  = "dev.cubby.build.memory-mb"
	// annSnapshot and annSnapshotRT: the build's ready snapshot (backend
	// snapshot ID) and the runtime it was taken under; absent without one.
	annSnapshot   = "dev.cubby.build.snapshot"
	annSnapshotRT = "dev.cubby.build.snapshot-runtime"
)

// Labels of a built template's image config.
const (
	labelStartCmd  = "dev.cubby.start-cmd"
	labelReadyCmd  = "dev.cubby.ready-cmd"
	labelRuntime   = "dev.cubby.runtime"
	labelShippable = "dev.cubby.shippable" // "false" when the tree's base is not in the layout
)

var tagRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// publication is a finished build to record under tags.
type publication struct {
	ID, Name  string
	Team      string   // owning team ("" = none)
	Aliases   []string // without Name
	BuildID   string
	Manifest  v1.Descriptor
	Tree      v1.Hash
	SizeBytes int64
	CPUCount  int
	MemoryMB  int
	Tags      []string
	Ready     *readySnap // the build's ready snapshot; nil = none
}

// publish points each tag of p at its manifest (replacing the tag's previous
// build) under the index lock. Errors wrap ErrAliasTaken when a name or
// alias belongs to another template.
func (m *Manager) publish(ctx context.Context, p publication) error {
	created := time.Now().UTC().Format(time.RFC3339Nano)
	return m.store.UpdateIndex(ctx, func(idx *v1.IndexManifest) error {
		if err := checkAliases(idx, p.ID, p.Team, append([]string{p.Name}, p.Aliases...)); err != nil {
			return err
		}
		public := "false"
		for _, d := range idx.Manifests {
			if d.Annotations[annID] == p.ID {
				public = d.Annotations[annPublic]
			}
		}
		idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d v1.Descriptor) bool {
			return d.Annotations[annID] == p.ID && slices.Contains(p.Tags, d.Annotations[annTag])
		})
		for _, tag := range p.Tags {
			d := p.Manifest
			d.Annotations = map[string]string{
				annRefName: p.Name + ":" + tag, annID: p.ID, annName: p.Name,
				annAliases: strings.Join(append([]string{p.Name}, p.Aliases...), ","), annPublic: public,
				annTag: tag, annBuild: p.BuildID, annCreated: created, annTree: p.Tree.Hex,
				annSize: strconv.FormatInt(p.SizeBytes, 10), annCPU: strconv.Itoa(p.CPUCount), annMemory: strconv.Itoa(p.MemoryMB),
			}
			if p.Team != "" {
				d.Annotations[annTeam] = p.Team
			}
			if p.Ready != nil {
				d.Annotations[annSnapshot], d.Annotations[annSnapshotRT] = p.Ready.ID, p.Ready.Runtime
			}
			idx.Manifests = append(idx.Manifests, d)
		}
		return nil
	})
}

// checkAliases fails when one of names is the name, an alias or the ID of a
// template other than id, or when id belongs to a team other than team.
func checkAliases(idx *v1.IndexManifest, id, team string, names []string) error {
	for _, d := range idx.Manifests {
		if d.Annotations[annID] == id {
			if d.Annotations[annTeam] != team {
				return fmt.Errorf("%w: template %s belongs to another team", ErrAliasTaken, d.Annotations[annName])
			}
			continue
		}
		taken := strings.Split(d.Annotations[annAliases], ",")
		for _, n := range names {
			if slices.Contains(taken, n) || n == d.Annotations[annID] {
				return fmt.Errorf("%w: %q names template %s (%s)", ErrAliasTaken, n, d.Annotations[annName], d.Annotations[annID])
			}
		}
	}
	return nil
}

// builds decodes every index entry into an Info (one per tag).
func (m *Manager) builds() ([]Info, error) {
	idx, err := m.store.Index()
	if err != nil {
		return nil, err
	}
	tags := map[string][]string{} // build ID -> tags
	for _, d := range idx.Manifests {
		if d.Annotations[annID] != "" {
			tags[d.Annotations[annBuild]] = append(tags[d.Annotations[annBuild]], d.Annotations[annTag])
		}
	}
	var out []Info
	for _, d := range idx.Manifests {
		if d.Annotations[annID] == "" {
			continue
		}
		info, err := m.infoOf(d)
		if err != nil {
			m.log.Warn("skipping unreadable template build", "ref", d.Annotations[annRefName], "err", err)
			continue
		}
		info.Tags = tags[info.BuildID]
		slices.Sort(info.Tags)
		out = append(out, info)
	}
	return out, nil
}

// infoOf builds the Info of one index entry from its annotations and config.
func (m *Manager) infoOf(d v1.Descriptor) (Info, error) {
	a := d.Annotations
	cfg, err := m.config(d.Digest)
	if err != nil {
		return Info{}, err
	}
	tree, err := v1.NewHash("sha256:" + a[annTree])
	if err != nil {
		return Info{}, fmt.Errorf("tree annotation: %w", err)
	}
	created, _ := time.Parse(time.RFC3339Nano, a[annCreated])
	size, _ := strconv.ParseInt(a[annSize], 10, 64)
	cpu, _ := strconv.Atoi(a[annCPU])
	mem, _ := strconv.Atoi(a[annMemory])
	c := cfg.Config
	return Info{
		ID: a[annID], Name: a[annName], Aliases: strings.Split(a[annAliases], ","), Tag: a[annTag],
		BuildID: a[annBuild], Digest: d.Digest.String(), RootfsDir: m.treeDir(tree), BuiltAt: created,
		SizeBytes: size, User: c.User, Workdir: c.WorkingDir, Env: envMap(c.Env),
		StartCmd: c.Labels[labelStartCmd], ReadyCmd: c.Labels[labelReadyCmd], Runtime: c.Labels[labelRuntime],
		Public: a[annPublic] == "true", Team: a[annTeam], CPUCount: cpu, MemoryMB: mem, Shippable: c.Labels[labelShippable] != "false",
		Snapshot: a[annSnapshot], SnapshotRuntime: a[annSnapshotRT],
	}, nil
}

// config returns the image config of manifest d (cached: content is immutable).
func (m *Manager) config(d v1.Hash) (v1.ConfigFile, error) {
	m.mu.Lock()
	cfg, ok := m.configs[d]
	m.mu.Unlock()
	if ok {
		return cfg, nil
	}
	var man v1.Manifest
	if err := m.store.ReadJSON(d, &man); err != nil {
		return v1.ConfigFile{}, err
	}
	if err := m.store.ReadJSON(man.Config.Digest, &cfg); err != nil {
		return v1.ConfigFile{}, err
	}
	m.mu.Lock()
	m.configs[d] = cfg
	m.mu.Unlock()
	return cfg, nil
}

// envMap turns KEY=value pairs into a map (later pairs win).
func envMap(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			out[k] = v
		}
	}
	return out
}

// AssignTags points tags at the build target names ("name:tag" or "name"
// for its default build) and returns that build's ID (E2B POST
// /templates/tags). Errors wrap ErrNotFound, or ErrInvalidSpec for a bad tag.
func (m *Manager) AssignTags(ctx context.Context, target string, tags []string) (string, error) {
	if len(tags) == 0 {
		return "", fmt.Errorf("%w: no tags given", ErrInvalidSpec)
	}
	for _, t := range tags {
		if !tagRe.MatchString(t) {
			return "", fmt.Errorf("%w: tag %q must match %s", ErrInvalidSpec, t, tagRe)
		}
	}
	src, err := m.Get(target)
	if err != nil {
		return "", err
	}
	if src.Tag == "" {
		return "", fmt.Errorf("template %q was built by an earlier Cubby version and cannot be tagged; rebuild it: %w", target, ErrNotFound)
	}
	d, err := m.descriptor(src)
	if err != nil {
		return "", err
	}
	return src.BuildID, m.publish(ctx, publication{
		ID: src.ID, Name: src.Name, Team: src.Team, Aliases: src.Aliases[1:], BuildID: src.BuildID, Manifest: d,
		Tree: mustHash(src.RootfsDir), SizeBytes: src.SizeBytes, CPUCount: src.CPUCount, MemoryMB: src.MemoryMB, Tags: tags,
		Ready: src.ready(),
	})
}

// ready is the ready snapshot of build i, nil without one.
func (i Info) ready() *readySnap {
	if i.Snapshot == "" {
		return nil
	}
	return &readySnap{ID: i.Snapshot, Runtime: i.SnapshotRuntime}
}

// descriptor is the manifest descriptor of a build in the index.
func (m *Manager) descriptor(info Info) (v1.Descriptor, error) {
	d, err := v1.NewHash(info.Digest)
	if err != nil {
		return v1.Descriptor{}, err
	}
	f, err := m.store.Open(d)
	if err != nil {
		return v1.Descriptor{}, err
	}
	st, err := f.Stat()
	f.Close()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: d, Size: st.Size()}, nil
}

// mustHash turns a tree path (…/trees/<hex>) back into its chain ID.
func mustHash(treeDir string) v1.Hash {
	i := strings.LastIndexByte(treeDir, '/')
	return v1.Hash{Algorithm: "sha256", Hex: treeDir[i+1:]}
}

// RemoveTags removes tags from template name (E2B DELETE /templates/tags).
// Builds left without a tag are removed with the next Prune. Errors wrap
// ErrNotFound when the template or one of the tags does not exist.
func (m *Manager) RemoveTags(ctx context.Context, name string, tags []string) error {
	return m.store.UpdateIndex(ctx, func(idx *v1.IndexManifest) error {
		id := resolveID(idx, name)
		if id == "" {
			return fmt.Errorf("template %q: %w", name, ErrNotFound)
		}
		for _, t := range tags {
			if !slices.ContainsFunc(idx.Manifests, func(d v1.Descriptor) bool { return d.Annotations[annID] == id && d.Annotations[annTag] == t }) {
				return fmt.Errorf("template %q has no tag %q: %w", name, t, ErrNotFound)
			}
		}
		idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d v1.Descriptor) bool {
			return d.Annotations[annID] == id && slices.Contains(tags, d.Annotations[annTag])
		})
		return nil
	})
}

// resolveID returns the ID of the template idOrName names in idx, or "".
func resolveID(idx *v1.IndexManifest, idOrName string) string {
	for _, d := range idx.Manifests {
		if d.Annotations[annID] == idOrName || slices.Contains(strings.Split(d.Annotations[annAliases], ","), idOrName) {
			return d.Annotations[annID]
		}
	}
	return ""
}

// Delete removes every tag of template idOrName. Its trees stay until Prune
// finds them unused, so running sandboxes keep working. Errors wrap
// ErrNotFound, or ErrReadOnly for a legacy template.
func (m *Manager) Delete(ctx context.Context, idOrName string) error {
	found := false
	err := m.store.UpdateIndex(ctx, func(idx *v1.IndexManifest) error {
		id := resolveID(idx, idOrName)
		if id == "" {
			return nil
		}
		found = true
		idx.Manifests = slices.DeleteFunc(idx.Manifests, func(d v1.Descriptor) bool { return d.Annotations[annID] == id })
		return nil
	})
	if err != nil {
		return err
	}
	if found {
		return nil
	}
	if _, err := m.legacyGet(idOrName); err == nil {
		return fmt.Errorf("template %q: %w", idOrName, ErrReadOnly)
	}
	return fmt.Errorf("template %q: %w", idOrName, ErrNotFound)
}

// SetPublic records whether template idOrName is public (E2B PATCH
// /v2/templates/{id}). Errors wrap ErrNotFound.
func (m *Manager) SetPublic(ctx context.Context, idOrName string, public bool) (Info, error) {
	err := m.store.UpdateIndex(ctx, func(idx *v1.IndexManifest) error {
		id := resolveID(idx, idOrName)
		if id == "" {
			return fmt.Errorf("template %q: %w", idOrName, ErrNotFound)
		}
		for _, d := range idx.Manifests {
			if d.Annotations[annID] == id {
				d.Annotations[annPublic] = strconv.FormatBool(public)
			}
		}
		return nil
	})
	if err != nil {
		return Info{}, err
	}
	return m.Get(idOrName)
}
