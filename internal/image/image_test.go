package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cubby-dev/cubby/internal/layer"
	"github.com/cubby-dev/cubby/internal/testenv/testregistry"
)

func startRegistry(t *testing.T, user, pass string) *testregistry.Registry {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", "..")) // tests run in internal/image
	if err != nil {
		t.Fatal(err)
	}
	r, err := testregistry.Start(repo, testregistry.Options{Username: user, Password: pass})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

type file struct {
	name, body, link string
	typ              byte
}

func tarOf(t *testing.T, files ...file) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if f.typ == 0 {
			f.typ = tar.TypeReg
		}
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Linkname: f.link, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(1e9, 0)}
		if f.typ != tar.TypeReg {
			h.Size, h.Mode = 0, 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, f.body)
	}
	tw.Close()
	return buf.Bytes()
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c
}

// TestPullAndUnpack pushes a two-layer image (the second whites out and
// hard-links) to a real registry with authentication, pulls it, checks the
// credential errors and the layer cache, and unpacks it.
func TestPullAndUnpack(t *testing.T) {
	reg := startRegistry(t, "alice", "s3cret")
	l1 := tarOf(t, file{name: "etc/", typ: tar.TypeDir}, file{name: "etc/os-release", body: "ID=test\n"},
		file{name: "etc/old", body: "old"}, file{name: "var/lib/", typ: tar.TypeDir}, file{name: "var/lib/x", body: "x"})
	l2 := tarOf(t, file{name: "etc/.wh.old"}, file{name: "var/lib/.wh..wh..opq"}, file{name: "var/lib/y", body: "y"},
		file{name: "usr/bin/a", body: "bin"}, file{name: "usr/bin/b", typ: tar.TypeLink, link: "usr/bin/a"})
	ref, err := reg.Push(ctx(t), "team/app:1", v1.Config{Env: []string{"PATH=/opt/bin:/usr/bin", "A=1"}, User: "app", WorkingDir: "/srv"}, l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	store, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := NewPuller(store, PullerConfig{})
	for _, c := range []*Credentials{nil, {Username: "alice", Password: "wrong"}} {
		_, err := p.Pull(ctx(t), ref, c, nil)
		if !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "UNAUTHORIZED") {
			t.Errorf("credentials %+v: err = %v", c, err)
		}
	}
	var log []string
	logf := func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }
	img, err := p.Pull(ctx(t), ref, &Credentials{Username: "alice", Password: "s3cret"}, logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(img.Layers) != 2 || img.Config.Config.User != "app" || img.Config.Config.WorkingDir != "/srv" {
		t.Fatalf("image = %+v", img)
	}
	for _, l := range img.Layers {
		if !store.Has(l.Digest) {
			t.Errorf("layer %s not stored", l.Digest)
		}
	}
	log = nil
	if _, err := p.Pull(ctx(t), ref, &Credentials{Username: "alice", Password: "s3cret"}, logf); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, "\n"); strings.Count(got, "cached") != 2 || strings.Contains(got, "Pulling layer") {
		t.Errorf("second pull did not use the layer cache:\n%s", got)
	}
	_, err = p.Pull(ctx(t), reg.Addr+"/team/app:nope", &Credentials{Username: "alice", Password: "s3cret"}, nil)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "MANIFEST_UNKNOWN") {
		t.Errorf("unknown tag: %v", err)
	}
	checkUnpack(t, store, img)
}

func checkUnpack(t *testing.T, store *Store, img Image) {
	t.Helper()
	dir := t.TempDir()
	for _, l := range img.Layers {
		rc, err := store.OpenLayer(l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := layer.Apply(context.Background(), dir, rc, layer.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	var got []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if !fi.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			got = append(got, rel)
		}
		return nil
	})
	if strings.Join(got, " ") != "etc/os-release usr/bin/a usr/bin/b var/lib/y" {
		t.Errorf("unpacked files: %v", got)
	}
}

// TestDockerHubNamesThroughMirror checks that short Docker Hub names resolve
// as Docker resolves them (library/ prefix, latest tag), served by a mirror.
func TestDockerHubNamesThroughMirror(t *testing.T) {
	reg := startRegistry(t, "", "")
	body := tarOf(t, file{name: "hello", body: "hi"})
	for _, repo := range []string{"library/python:3.12", "myorg/tool:latest"} {
		if _, err := reg.Push(ctx(t), repo, v1.Config{}, body); err != nil {
			t.Fatal(err)
		}
	}
	store, _ := OpenStore(t.TempDir())
	p, err := NewPuller(store, PullerConfig{Mirror: "http://" + reg.Addr})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"python:3.12", "docker.io/library/python:3.12", "index.docker.io/library/python:3.12", "myorg/tool"} {
		if _, err := p.Pull(ctx(t), ref, nil, nil); err != nil {
			t.Errorf("pull %s through the mirror: %v", ref, err)
		}
	}
	for ref, want := range map[string]string{
		"python:3.12":        reg.Addr + "/library/python:3.12",
		"myorg/tool":         reg.Addr + "/myorg/tool:latest",
		"ghcr.io/org/img:v1": "ghcr.io/org/img:v1",
		"quay.io/x/y@sha256:" + strings.Repeat("a", 64): "quay.io/x/y@sha256:" + strings.Repeat("a", 64),
	} {
		r, err := p.Reference(ref)
		if err != nil || r.Name() != want {
			t.Errorf("Reference(%q) = %v, %v; want %s", ref, r, err, want)
		}
	}
	if _, err := p.Reference("Bad Ref!"); !errors.Is(err, ErrBadReference) {
		t.Errorf("bad reference: %v", err)
	}
	if _, err := NewPuller(store, PullerConfig{Mirror: "ftp://x"}); err == nil {
		t.Error("ftp mirror accepted")
	}
}

// TestDenyNets: pulls never connect to denied addresses, however the
// reference names them.
func TestDenyNets(t *testing.T) {
	reg := startRegistry(t, "", "")
	if _, err := reg.Push(ctx(t), "x/y:1", v1.Config{}, tarOf(t, file{name: "a", body: "a"})); err != nil {
		t.Fatal(err)
	}
	store, _ := OpenStore(t.TempDir())
	p, _ := NewPuller(store, PullerConfig{DenyNets: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	port := strings.Split(reg.Addr, ":")[1]
	for _, ref := range []string{reg.Addr + "/x/y:1", "localhost:" + port + "/x/y:1"} {
		if _, err := p.Pull(ctx(t), ref, nil, nil); !errors.Is(err, ErrDeniedAddress) {
			t.Errorf("pull %s: %v, want ErrDeniedAddress", ref, err)
		}
	}
	open, _ := NewPuller(store, PullerConfig{DenyNets: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if _, err := open.Pull(ctx(t), reg.Addr+"/x/y:1", nil, nil); err != nil {
		t.Errorf("allowed address: %v", err)
	}
}

func TestWriteLayerRoundTrip(t *testing.T) {
	store, _ := OpenStore(t.TempDir())
	body := tarOf(t, file{name: "a", body: strings.Repeat("cubby", 1000)})
	l, raw, err := store.WriteLayer(context.Background(), func(w io.Writer) error { _, err := w.Write(body); return err })
	if err != nil || raw != int64(len(body)) || l.MediaType != LayerMediaType {
		t.Fatalf("WriteLayer = %+v %d %v", l, raw, err)
	}
	rc, err := store.OpenLayer(l)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, body) {
		t.Fatal("layer content differs")
	}
	if got := ChainID([]v1.Hash{l.DiffID}); got != l.DiffID {
		t.Errorf("chain of one layer = %s", got)
	}
	// The identity of a chain of two layers is sha256("<chain> <diffID>").
	a, _ := v1.NewHash("sha256:" + strings.Repeat("a", 64))
	b, _ := v1.NewHash("sha256:" + strings.Repeat("b", 64))
	want := sha256.Sum256([]byte(a.String() + " " + b.String()))
	if got := ChainID([]v1.Hash{a, b}).Hex; got != hex.EncodeToString(want[:]) {
		t.Errorf("chain ID %s", got)
	}
	if _, _, err := store.Write(context.Background(), strings.NewReader("x"), a); err == nil {
		t.Error("content with a wrong digest was stored")
	}
}
