package image

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	goruntime "runtime"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Errors wrapped by Pull, for callers that map them to their own shapes.
var (
	// ErrBadReference: the image reference does not parse.
	ErrBadReference = errors.New("invalid image reference")
	// ErrUnauthorized: the registry refused the (missing or given) credentials.
	ErrUnauthorized = errors.New("registry authentication failed")
	// ErrNotFound: the registry has no such repository, tag or digest.
	ErrNotFound = errors.New("image not found")
)

// Credentials authenticate to a registry with a username and password (or
// token), as Docker's `login` does.
type Credentials struct {
	Username string
	Password string
}

// PullerConfig configures a Puller.
type PullerConfig struct {
	// Mirror, when set, serves every Docker Hub reference ("python:3.12",
	// "docker.io/library/python:3.12") instead of Docker Hub, like Docker's
	// registry-mirrors: "host[:port]" or "http://host[:port]" (plain HTTP).
	// References naming another registry are pulled from it directly.
	Mirror string
	// Transport carries registry requests; nil = a clone of
	// http.DefaultTransport (which honours HTTPS_PROXY and friends and trusts
	// the host's CA store) that refuses DenyNets.
	Transport http.RoundTripper
	// DenyNets are addresses registry connections must never reach (the
	// sandboxes' subnet, link-local metadata services): a build's image
	// reference is the requester's choice, and the pull runs on the host.
	// Checked on the resolved address of every connection.
	DenyNets []netip.Prefix
}

// Puller pulls images into a Store. Safe for concurrent use.
type Puller struct {
	store     *Store
	mirror    string
	insecure  bool
	transport http.RoundTripper
	platform  v1.Platform
}

// NewPuller returns a Puller storing into store. Errors: a malformed Mirror.
func NewPuller(store *Store, cfg PullerConfig) (*Puller, error) {
	p := &Puller{store: store, transport: cfg.Transport, platform: v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}}
	if p.transport == nil {
		p.transport = guardedTransport(cfg.DenyNets)
	}
	if m := cfg.Mirror; m != "" {
		if strings.Contains(m, "://") {
			u, err := url.Parse(m)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.Trim(u.Path, "/") != "" {
				return nil, fmt.Errorf("registry mirror %q: want host[:port] or http(s)://host[:port]", m)
			}
			m, p.insecure = u.Host, u.Scheme == "http"
		}
		if _, err := name.NewRegistry(m); err != nil {
			return nil, fmt.Errorf("registry mirror %q: %w", cfg.Mirror, err)
		}
		p.mirror = m
	}
	return p, nil
}

// ErrDeniedAddress is wrapped by pulls that would connect to a denied address.
var ErrDeniedAddress = errors.New("registry address not allowed")

// guardedTransport is http.DefaultTransport refusing connections to deny.
func guardedTransport(deny []netip.Prefix) http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			for _, p := range deny {
				if p.Contains(ap.Addr().Unmap()) {
					return fmt.Errorf("%w: %s", ErrDeniedAddress, ap.Addr())
				}
			}
			return nil
		}}
	t.DialContext = d.DialContext
	return t
}

// Reference parses an image reference the way Docker does ("python:3.12" is
// index.docker.io/library/python:3.12; a missing tag is "latest"), with
// Docker Hub references redirected to the mirror. Errors wrap ErrBadReference.
func (p *Puller) Reference(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrBadReference, ref, err)
	}
	if p.mirror == "" || r.Context().RegistryStr() != name.DefaultRegistry {
		return r, nil
	}
	var opts []name.Option
	if p.insecure {
		opts = append(opts, name.Insecure)
	}
	repo := p.mirror + "/" + r.Context().RepositoryStr()
	switch v := r.(type) {
	case name.Digest:
		return name.NewDigest(repo+"@"+v.DigestStr(), opts...)
	default:
		return name.NewTag(repo+":"+r.Identifier(), opts...)
	}
}

// Pull fetches ref's manifest (for an index: the linux image of this host's
// architecture) and config, and every layer blob the store lacks (layers are
// cached by digest and verified as they are written). creds nil = anonymous.
// logf (may be nil) receives one line per step. Errors wrap ErrBadReference,
// ErrUnauthorized, ErrNotFound or carry the registry's own error.
func (p *Puller) Pull(ctx context.Context, ref string, creds *Credentials, logf func(format string, args ...any)) (Image, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	r, err := p.Reference(ref)
	if err != nil {
		return Image{}, err
	}
	auth := authn.Anonymous
	if creds != nil {
		auth = &authn.Basic{Username: creds.Username, Password: creds.Password}
	}
	logf("Resolving %s", r.Name())
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithPlatform(p.platform),
		remote.WithTransport(p.transport), remote.WithUserAgent("cubby"))
	if err != nil {
		return Image{}, classify(r, err)
	}
	out, err := p.fetch(ctx, r, img, logf)
	if err != nil {
		return Image{}, classify(r, err)
	}
	return out, nil
}

// fetch stores img's layers, config and manifest and returns it.
func (p *Puller) fetch(ctx context.Context, r name.Reference, img v1.Image, logf func(string, ...any)) (Image, error) {
	digest, err := img.Digest()
	if err != nil {
		return Image{}, err
	}
	layers, err := img.Layers()
	if err != nil {
		return Image{}, err
	}
	for i, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return Image{}, err
		}
		if p.store.Has(d) {
			logf("Layer %d/%d %s cached", i+1, len(layers), d.Hex[:12])
			continue
		}
		size, _ := l.Size()
		logf("Pulling layer %d/%d %s (%.1f MiB)", i+1, len(layers), d.Hex[:12], float64(size)/(1<<20))
		rc, err := l.Compressed()
		if err != nil {
			return Image{}, err
		}
		_, _, err = p.store.Write(ctx, rc, d)
		rc.Close()
		if err != nil {
			return Image{}, fmt.Errorf("layer %s: %w", d, err)
		}
	}
	if err := p.storeJSON(ctx, img); err != nil {
		return Image{}, err
	}
	logf("Pulled %s@%s", r.Context().Name(), digest)
	return p.store.Image(digest)
}

// storeJSON stores img's raw config and manifest under their digests.
func (p *Puller) storeJSON(ctx context.Context, img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	if _, _, err := p.store.Write(ctx, strings.NewReader(string(cfg)), m.Config.Digest); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	if _, _, err := p.store.Write(ctx, strings.NewReader(string(raw)), d); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	return nil
}

// classify wraps registry errors with the package's sentinel errors.
func classify(r name.Reference, err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		switch {
		case terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden:
			return fmt.Errorf("pull %s: %w: %v", r.Name(), ErrUnauthorized, err)
		case terr.StatusCode == http.StatusNotFound:
			return fmt.Errorf("pull %s: %w: %v", r.Name(), ErrNotFound, err)
		}
	}
	return fmt.Errorf("pull %s: %w", r.Name(), err)
}

// Image is an image whose manifest, config and layer blobs the store holds.
type Image struct {
	Manifest v1.Hash       // digest of the image manifest
	Config   v1.ConfigFile // the image config (env, user, workdir, cmd, diff IDs)
	Layers   []Layer       // bottom first
}

// DiffIDs returns the diff IDs of the image's layers, bottom first.
func (i Image) DiffIDs() []v1.Hash {
	out := make([]v1.Hash, len(i.Layers))
	for k, l := range i.Layers {
		out[k] = l.DiffID
	}
	return out
}

// Image loads the image with manifest digest d from the store. Errors wrap
// ErrBlobNotFound when its manifest or config is missing.
func (s *Store) Image(d v1.Hash) (Image, error) {
	var m v1.Manifest
	if err := s.ReadJSON(d, &m); err != nil {
		return Image{}, fmt.Errorf("manifest %s: %w", d, err)
	}
	var cfg v1.ConfigFile
	if err := s.ReadJSON(m.Config.Digest, &cfg); err != nil {
		return Image{}, fmt.Errorf("config of %s: %w", d, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return Image{}, fmt.Errorf("image %s: %d layers but %d diff IDs", d, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	img := Image{Manifest: d, Config: cfg}
	for i, l := range m.Layers {
		if !isLayer(l.MediaType) {
			return Image{}, fmt.Errorf("image %s: layer %d has unsupported media type %s", d, i, l.MediaType)
		}
		img.Layers = append(img.Layers, Layer{Digest: l.Digest, DiffID: cfg.RootFS.DiffIDs[i], Size: l.Size, MediaType: l.MediaType})
	}
	return img, nil
}

// isLayer accepts the OCI and Docker layer media types (gzip, zstd, none).
func isLayer(mt types.MediaType) bool {
	switch mt {
	case types.DockerLayer, types.OCILayer, types.OCIUncompressedLayer, types.OCILayerZStd, types.DockerUncompressedLayer:
		return true
	}
	return false
}
