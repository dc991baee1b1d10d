package testregistry

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cubby-dev/cubby/internal/layer"
)

// Push pushes an image whose layers (bottom first) are the given
// uncompressed tars, with image config cfg, as repoTag ("team/app:1") and
// returns its full reference ("127.0.0.1:port/team/app:1").
func (r *Registry) Push(ctx context.Context, repoTag string, cfg v1.Config, layers ...[]byte) (string, error) {
	var ls []v1.Layer
	for _, b := range layers {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
			tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			return "", err
		}
		ls = append(ls, l)
	}
	return r.push(ctx, repoTag, cfg, ls)
}

// PushTree pushes the directory tree dir as a one-layer image (see Push).
func (r *Registry) PushTree(ctx context.Context, repoTag, dir string, cfg v1.Config) (string, error) {
	f, err := os.CreateTemp("", "cubby-tree-*.tar")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := layer.WriteDiff(ctx, dir, f, layer.DiffOptions{}); err != nil {
		return "", fmt.Errorf("tar %s: %w", dir, err)
	}
	l, err := tarball.LayerFromFile(f.Name(), tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		return "", err
	}
	return r.push(ctx, repoTag, cfg, []v1.Layer{l})
}

func (r *Registry) push(ctx context.Context, repoTag string, cfg v1.Config, layers []v1.Layer) (string, error) {
	img, err := mutate.Config(empty.Image, cfg)
	if err != nil {
		return "", err
	}
	if img, err = mutate.AppendLayers(img, layers...); err != nil {
		return "", err
	}
	ref, err := name.ParseReference(r.Addr + "/" + repoTag)
	if err != nil {
		return "", err
	}
	auth := authn.Anonymous
	if r.Username != "" {
		auth = &authn.Basic{Username: r.Username, Password: r.Password}
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuth(auth)); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	return ref.Name(), nil
}
