package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/image"
)

// Defaults of a build's user and working directory once the base is
// provisioned (E2B: commands run as "user" in its home unless a USER or
// WORKDIR step says otherwise).
const (
	buildUser    = DefaultUser
	buildWorkdir = agentapi.DefaultWorkdir
)

// base prepares the build's starting state from the spec's source.
func (r *run) base(ctx context.Context) error {
	from := r.req.Spec.From
	switch {
	case from.Image != "":
		return r.fromImage(ctx)
	case from.Template != "":
		return r.fromTemplate(from.Template)
	default:
		return r.fromDebian(ctx)
	}
}

func (r *run) fromImage(ctx context.Context) error {
	from := r.req.Spec.From
	if r.b.cfg.Puller == nil {
		return errors.New("this server cannot pull images (no registry access configured)")
	}
	r.logf(LevelInfo, StepBase, "[base] FROM %s", from.Image)
	img, err := r.b.cfg.Puller.Pull(ctx, from.Image, from.Registry, func(f string, a ...any) {
		r.logf(LevelInfo, StepBase, f, a...)
	})
	if err != nil {
		return err
	}
	st, err := r.b.m.unpack(ctx, img)
	if err != nil {
		return fmt.Errorf("unpack %s: %w", from.Image, err)
	}
	st.env = envMap(img.Config.Config.Env)
	r.st = st
	return r.provision(ctx)
}

// unpack returns the state of image img's tree, making it from the longest
// prefix of its layers that already has a tree (or from nothing).
func (m *Manager) unpack(ctx context.Context, img image.Image) (state, error) {
	diffIDs := img.DiffIDs()
	start := state{shippable: true}
	for n := len(diffIDs); n > 0; n-- {
		chain := image.ChainID(diffIDs[:n])
		if m.hasTree(chain) {
			start = state{chain: chain, tree: m.treeDir(chain), layers: copyLayers(img.Layers[:n]), shippable: true}
			break
		}
	}
	st := start
	for _, l := range img.Layers[len(start.layers):] {
		next, err := m.applyStored(ctx, st, l)
		if err != nil {
			return state{}, err
		}
		st = next
	}
	if st.tree == "" { // an image without layers
		return state{}, errors.New("the image has no layers")
	}
	return st, nil
}

func (r *run) fromTemplate(ref string) error {
	r.logf(LevelInfo, StepBase, "[base] FROM template %s", ref)
	info, err := r.b.m.Get(ref)
	if err == nil && !info.VisibleTo(r.req.Team) {
		err = fmt.Errorf("template %q: %w", ref, ErrNotFound) // another team's: as if absent
	}
	if err != nil {
		return fmt.Errorf("fromTemplate: %w", err)
	}
	st := state{tree: info.RootfsDir, user: info.User, workdir: info.Workdir, env: copyEnv(info.Env), shippable: info.Shippable}
	if info.Tag == "" { // a legacy tree: identified by its definition digest
		sum := sha256.Sum256([]byte("cubby-legacy-tree:" + info.ID + ":" + info.Digest))
		st.chain = v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	} else {
		st.chain = mustHash(info.RootfsDir)
		d, err := v1.NewHash(info.Digest)
		if err != nil {
			return err
		}
		img, err := r.b.m.store.Image(d)
		if err != nil {
			return fmt.Errorf("template %s: %w", ref, err)
		}
		st.layers = img.Layers
	}
	if st.user == "" {
		st.user, st.workdir = buildUser, buildWorkdir
	}
	r.st = st
	r.logf(LevelInfo, StepBase, "Using template %s build %s", info.Name, info.BuildID)
	return nil
}

func copyEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = v
	}
	return out
}
