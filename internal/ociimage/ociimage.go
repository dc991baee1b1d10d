// Package ociimage turns a built template tree into an OCI image a cluster
// can run (the kubernetes backend's sandbox image): one layer holding the
// tree as it is on disk (owners, modes, hard links, devices, extended
// attributes such as file capabilities), one layer holding the Cubby binary
// at AgentPath, and a config whose entrypoint is the agent. The image is
// written as a docker-archive tarball (what `ctr images import` and `docker
// load` read) and may be pushed to a registry. Image formats come from
// go-containerregistry.
package ociimage

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// AgentPath is where the image holds the agent (the Cubby binary); the
// kubernetes backend starts it as the container's PID 1.
const AgentPath = agentapi.AgentPath

// Labels of exported images.
const (
	LabelTemplateID     = "dev.cubby.template.id"
	LabelTemplateName   = "dev.cubby.template.name"
	LabelTemplateDigest = "dev.cubby.template.digest"
)

// Spec describes one image to build.
type Spec struct {
	RootfsDir   string // the template tree
	AgentBinary string // the Cubby binary to bake in
	TemplateID  string
	Name        string // template name
	Digest      string // template build digest
	// WorkDir holds the compressed layers while the image is written (they
	// are large: the tree's size, gzipped); default the system temp dir.
	WorkDir string
	// LayerCache, when set, keeps the tree's compressed layer between builds
	// (a tree is immutable: it is keyed by its path), so exporting a template
	// again after the agent changed costs one small layer.
	LayerCache string
}

// Build returns the image of s. Its layers live in files under s.WorkDir
// until cleanup is called. Errors: unreadable tree or binary, a full disk.
func Build(ctx context.Context, s Spec) (img v1.Image, cleanup func(), err error) {
	dir, err := os.MkdirTemp(s.WorkDir, "cubby-image-")
	if err != nil {
		return nil, nil, fmt.Errorf("image work dir: %w", err)
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	tree, err := s.treeLayer(ctx, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("template layer: %w", err)
	}
	agent, err := gzipLayer(ctx, filepath.Join(dir, "agent.tar.gz"), func(w io.Writer) error { return writeAgent(w, s.AgentBinary) })
	if err != nil {
		return nil, nil, fmt.Errorf("agent layer: %w", err)
	}
	img, err = mutate.AppendLayers(empty.Image, tree, agent)
	if err != nil {
		return nil, nil, fmt.Errorf("assemble image: %w", err)
	}
	if img, err = configure(img, s); err != nil {
		return nil, nil, err
	}
	return img, cleanup, nil
}

// treeLayer returns the layer of the template tree, from LayerCache when it
// holds it, else written into dir (and then kept in LayerCache).
func (s Spec) treeLayer(ctx context.Context, dir string) (v1.Layer, error) {
	write := func(w io.Writer) error { return writeTree(ctx, w, s.RootfsDir) }
	if s.LayerCache == "" {
		return gzipLayer(ctx, filepath.Join(dir, "tree.tar.gz"), write)
	}
	sum := sha256.Sum256([]byte(s.RootfsDir))
	cached := filepath.Join(s.LayerCache, hex.EncodeToString(sum[:12])+".tar.gz")
	if _, err := os.Stat(cached); err == nil {
		return tarball.LayerFromFile(cached)
	}
	if err := os.MkdirAll(s.LayerCache, 0o755); err != nil {
		return nil, err
	}
	tmp := filepath.Join(s.LayerCache, ".partial-"+filepath.Base(dir))
	defer os.Remove(tmp)
	if _, err := gzipLayer(ctx, tmp, write); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, cached); err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(cached)
}

// configure sets the platform, entrypoint, environment and labels.
func configure(img v1.Image, s Spec) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	cf.Config = v1.Config{
		Entrypoint: []string{AgentPath, "agent"},
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"},
		WorkingDir: "/",
		Labels:     map[string]string{LabelTemplateID: s.TemplateID, LabelTemplateName: s.Name, LabelTemplateDigest: s.Digest},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	return img, nil
}

// gzipLayer writes a layer's tar (from write) gzipped to path once and
// returns it as a layer (go-containerregistry reads a compressed file as is).
func gzipLayer(ctx context.Context, path string, write func(io.Writer) error) (v1.Layer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zw, err := gzip.NewWriterLevel(f, gzip.BestSpeed)
	if err != nil {
		return nil, err
	}
	if err := write(zw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return tarball.LayerFromFile(path)
}

// LocalRef is the default reference of template name's image:
// cubby.local/templates/NAME:TAG, TAG the first 12 hex digits of the
// template's digest ("sha256:…" as templates record it, or bare hex).
func LocalRef(name, digest string) string {
	_, hex, ok := strings.Cut(digest, ":")
	if !ok {
		hex = digest
	}
	return "cubby.local/templates/" + name + ":" + hex[:min(12, len(hex))]
}

// WriteArchive writes img tagged ref as a docker-archive tarball at path.
func WriteArchive(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Push uploads img to the registry of ref with the credentials of the
// default keychain (docker config, credential helpers) and returns the
// pushed reference by digest.
func Push(ctx context.Context, ref string, img v1.Image) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	if err := remote.Write(r, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", fmt.Errorf("image digest: %w", err)
	}
	return r.Context().Digest(d.String()).String(), nil
}
