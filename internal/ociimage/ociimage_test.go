package ociimage

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// tree builds a small template tree with the kinds of entries real trees
// hold: a setuid binary owned by another user, a hard link, a symlink, a
// device node and an extended attribute.
func tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/bin/sudo"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Chown(filepath.Join(root, "usr/bin/sudo"), 0, 27))
	if err := unix.Setxattr(filepath.Join(root, "usr/bin/sudo"), "user.cubby", []byte("kept"), 0); err != nil {
		t.Logf("no user xattrs here: %v", err)
	}
	must(os.Chmod(filepath.Join(root, "usr/bin/sudo"), os.ModeSetuid|0o755)) // last: chown clears setuid
	must(os.Link(filepath.Join(root, "usr/bin/sudo"), filepath.Join(root, "usr/bin/sudoedit")))
	must(os.Symlink("sudo", filepath.Join(root, "usr/bin/su")))
	must(os.MkdirAll(filepath.Join(root, "dev"), 0o755))
	if os.Geteuid() == 0 {
		must(unix.Mknod(filepath.Join(root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	}
	return root
}

func TestBuildAndArchive(t *testing.T) {
	root := tree(t)
	agent := filepath.Join(t.TempDir(), "cubby")
	if err := os.WriteFile(agent, []byte("agent binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	spec := Spec{RootfsDir: root, AgentBinary: agent, TemplateID: "tid", Name: "base", Digest: "d1", LayerCache: cache}
	img, cleanup, err := Build(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := WriteArchive(archive, "cubby.local/templates/base:d1", img); err != nil {
		t.Fatal(err)
	}
	back, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := back.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Entrypoint[0] != agentapi.AgentPath || cf.Config.Labels[LabelTemplateID] != "tid" || cf.OS != "linux" {
		t.Fatalf("config %+v", cf.Config)
	}
	layers, err := back.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("%d layers, %v", len(layers), err)
	}
	entries := readLayer(t, layers[0])
	sudo := entries["usr/bin/sudo"]
	switch {
	case sudo == nil || sudo.Mode&0o4000 == 0 || sudo.Gid != 27:
		t.Errorf("sudo %+v", sudo)
	case entries["usr/bin/sudoedit"] == nil || entries["usr/bin/sudoedit"].Typeflag != tar.TypeLink:
		t.Errorf("hard link %+v", entries["usr/bin/sudoedit"])
	case entries["usr/bin/su"] == nil || entries["usr/bin/su"].Linkname != "sudo":
		t.Errorf("symlink %+v", entries["usr/bin/su"])
	case os.Geteuid() == 0 && (entries["dev/null"] == nil || entries["dev/null"].Typeflag != tar.TypeChar || entries["dev/null"].Devmajor != 1):
		t.Errorf("device %+v", entries["dev/null"])
	}
	if x, ok := sudo.PAXRecords["SCHILY.xattr.user.cubby"]; ok && x != "kept" {
		t.Errorf("xattr %q", x)
	}
	if a := readLayer(t, layers[1])["opt/cubby/bin/cubby"]; a == nil || a.Mode&0o111 == 0 {
		t.Errorf("agent %+v", a)
	}
	if cached, _ := filepath.Glob(filepath.Join(cache, "*.tar.gz")); len(cached) != 1 {
		t.Fatalf("layer cache holds %v", cached)
	}
	again, cleanup2, err := Build(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup2()
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Fatalf("the cached layer changed the image: %s vs %s", d1, d2)
	}
}

func readLayer(t *testing.T, l interface{ Uncompressed() (io.ReadCloser, error) }) map[string]*tar.Header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

func TestLocalRef(t *testing.T) {
	hex := "40e830c2cae335e1d0e2990c916119c731279113614eaa42cc1794370c4ff65b"
	for digest, want := range map[string]string{
		"sha256:" + hex: "cubby.local/templates/base:40e830c2cae3", // templates from code: a manifest digest
		hex:             "cubby.local/templates/base:40e830c2cae3", // legacy trees: bare hex
		"abc":           "cubby.local/templates/base:abc",
	} {
		if got := LocalRef("base", digest); got != want {
			t.Errorf("LocalRef(base, %q) = %q, want %q", digest, got, want)
		}
	}
}
