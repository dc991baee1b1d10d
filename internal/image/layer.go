package image

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
)

// LayerMediaType is the media type of layers the store writes itself
// (OCI image-spec: a tar compressed with zstd).
const LayerMediaType = types.OCILayerZStd

// Layer is one filesystem layer whose blob the store holds.
type Layer struct {
	Digest    v1.Hash         `json:"digest"`    // sha256 of the stored blob
	DiffID    v1.Hash         `json:"diffID"`    // sha256 of the uncompressed tar
	Size      int64           `json:"size"`      // bytes of the stored blob
	MediaType types.MediaType `json:"mediaType"` // as the blob is stored
}

// Descriptor is l's OCI content descriptor.
func (l Layer) Descriptor() v1.Descriptor {
	return v1.Descriptor{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size}
}

// OpenLayer returns the uncompressed tar stream of l, decompressing gzip or
// zstd as the blob's magic bytes say. Errors wrap ErrBlobNotFound when the
// blob is missing.
func (s *Store) OpenLayer(l Layer) (io.ReadCloser, error) {
	f, err := s.Open(l.Digest)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(f, 1<<20)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		return readCloser{zr, func() error { zr.Close(); return f.Close() }}, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		return readCloser{zr, func() error { zr.Close(); return f.Close() }}, nil
	}
	return readCloser{br, f.Close}, nil
}

// WriteLayer stores the uncompressed tar stream that produce writes,
// compressed with zstd (LayerMediaType), and returns the layer with both
// digests. raw is the uncompressed size.
func (s *Store) WriteLayer(ctx context.Context, produce func(io.Writer) error) (l Layer, raw int64, err error) {
	diffID := hashWriter{sha256.New()}
	digest, size, err := s.write(ctx, func(w io.Writer) error {
		enc, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2))
		if err != nil {
			return err
		}
		cw := &countWriter{w: io.MultiWriter(enc, diffID)}
		if err := produce(cw); err != nil {
			enc.Close()
			return err
		}
		raw = cw.n
		return enc.Close()
	}, v1.Hash{})
	if err != nil {
		return Layer{}, 0, err
	}
	return Layer{Digest: digest, DiffID: diffID.digest(), Size: size, MediaType: LayerMediaType}, raw, nil
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// ChainID is the OCI chain ID of layers given by their diff IDs
// (image-spec config.md "Layer ChainID"): the identity of the filesystem
// they make when applied in order. Empty for no layers.
func ChainID(diffIDs []v1.Hash) v1.Hash {
	var chain v1.Hash
	for i, d := range diffIDs {
		if i == 0 {
			chain = d
			continue
		}
		sum := sha256.Sum256([]byte(chain.String() + " " + d.String()))
		chain = v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", sum)}
	}
	return chain
}
