package template

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubby-dev/cubby/internal/atomicfile"
	"github.com/cubby-dev/cubby/internal/image"
	"github.com/cubby-dev/cubby/internal/layer"
	"golang.org/x/sys/unix"
)

// emptyTarSize is the size of a tar without entries (two zero blocks).
const emptyTarSize = 1024

// hasTree reports whether the tree of chain exists.
func (m *Manager) hasTree(chain v1.Hash) bool {
	_, err := os.Stat(m.treeDir(chain))
	return err == nil
}

// extend makes the tree of parent plus one layer: parent's tree is cloned
// (or an empty tree started when parent.tree is ""), produce writes the
// layer's tar, which is stored in the layout and applied to the clone at
// the same time. An empty layer (no entries) changes nothing: ok is false.
func (m *Manager) extend(ctx context.Context, parent state, produce func(io.Writer) error) (next state, ok bool, err error) {
	staging, dst, err := m.stage(ctx, parent.tree)
	if err != nil {
		return state{}, false, err
	}
	defer removeTree(staging)
	pr, pw := io.Pipe()
	applied := make(chan error, 1)
	go func() {
		_, err := layer.Apply(ctx, dst, pr, applyOptions)
		if err == nil {
			_, err = io.Copy(io.Discard, pr) // the tar's padding after its end marker
		}
		pr.CloseWithError(err)
		applied <- err
	}()
	l, raw, err := m.store.WriteLayer(ctx, func(w io.Writer) error { return produce(io.MultiWriter(w, pw)) })
	pw.CloseWithError(err)
	if aerr := <-applied; err == nil && aerr != nil {
		err = fmt.Errorf("apply layer: %w", aerr)
	}
	if err != nil {
		return state{}, false, err
	}
	if raw <= emptyTarSize {
		return parent, false, nil
	}
	next, err = m.commitTree(parent, l, dst)
	return next, err == nil, err
}

// stage creates a staging directory holding a clone of tree (or an empty
// tree) and returns the staging directory and the tree inside it.
func (m *Manager) stage(ctx context.Context, tree string) (staging, dst string, err error) {
	if err := os.MkdirAll(m.stagingDir(), 0o755); err != nil {
		return "", "", fmt.Errorf("staging: %w", err)
	}
	staging, err = os.MkdirTemp(m.stagingDir(), "tree-")
	if err != nil {
		return "", "", fmt.Errorf("staging: %w", err)
	}
	if err := os.Chmod(staging, 0o755); err != nil {
		removeTree(staging)
		return "", "", err
	}
	dst = filepath.Join(staging, "rootfs")
	if tree == "" {
		err = os.Mkdir(dst, 0o755)
	} else {
		_, err = layer.Clone(ctx, tree, dst)
	}
	if err != nil {
		removeTree(staging)
		return "", "", fmt.Errorf("staging: %w", err)
	}
	return staging, dst, nil
}

// commitTree moves the staged tree dst into place as parent + l.
func (m *Manager) commitTree(parent state, l image.Layer, dst string) (state, error) {
	next := parent
	next.layers = append(copyLayers(parent.layers), l)
	next.chain = chainAfter(parent.chain, l.DiffID)
	next.tree = m.treeDir(next.chain)
	// A rename onto an existing tree fails with ENOTEMPTY: another build
	// made the same tree meanwhile, and it is used as it is.
	if err := os.Rename(dst, next.tree); err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return state{}, fmt.Errorf("commit tree: %w", err)
	}
	return next, atomicfile.SyncDir(filepath.Dir(next.tree))
}

// applyStored makes the tree parent + l from l's stored blob (a cached
// step whose tree was pruned).
func (m *Manager) applyStored(ctx context.Context, parent state, l image.Layer) (state, error) {
	if m.hasTree(chainAfter(parent.chain, l.DiffID)) {
		next := parent
		next.layers = append(copyLayers(parent.layers), l)
		next.chain = chainAfter(parent.chain, l.DiffID)
		next.tree = m.treeDir(next.chain)
		return next, nil
	}
	staging, dst, err := m.stage(ctx, parent.tree)
	if err != nil {
		return state{}, err
	}
	defer removeTree(staging)
	rc, err := m.store.OpenLayer(l)
	if err != nil {
		return state{}, err
	}
	_, err = layer.Apply(ctx, dst, rc, applyOptions)
	rc.Close()
	if err != nil {
		return state{}, fmt.Errorf("apply layer %s: %w", l.Digest, err)
	}
	return m.commitTree(parent, l, dst)
}

// chainAfter is the chain ID of a tree with chain parent plus a layer with
// diffID (parent zero: the layer alone).
func chainAfter(parent, diffID v1.Hash) v1.Hash {
	if parent == (v1.Hash{}) {
		return diffID
	}
	return image.ChainID([]v1.Hash{parent, diffID})
}

// copyLayers copies a layer list so appending never aliases another state's.
func copyLayers(ls []image.Layer) []image.Layer {
	return append([]image.Layer(nil), ls...)
}

// adopt makes a tree under trees/ for st, whose tree lies elsewhere (a
// legacy tree): a clone of it named by st.chain.
func (m *Manager) adopt(ctx context.Context, st state) error {
	if m.hasTree(st.chain) {
		return nil
	}
	staging, dst, err := m.stage(ctx, st.tree)
	if err != nil {
		return err
	}
	defer removeTree(staging)
	if err := os.Rename(dst, m.treeDir(st.chain)); err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("commit tree: %w", err)
	}
	return nil
}
