package template

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/layer"
)

// Real vfs_cap_data values: v2 cap_net_raw+ep (Debian's ping), cap_net_raw+p
// (capability-aware, not effective) and v2 cap_net_bind_service+ep.
var (
	capNetRawEP    = []byte{0x01, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	capNetRawP     = []byte{0, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	capBindEP      = []byte{0x01, 0, 0, 0x02, 0, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	grantedNoRaw   = uint64(1)<<unix.CAP_NET_BIND_SERVICE | 1<<unix.CAP_SETUID
	grantedWithRaw = grantedNoRaw | 1<<unix.CAP_NET_RAW
)

func TestUngrantableCaps(t *testing.T) {
	for _, c := range []struct {
		name    string
		v       []byte
		granted uint64
		want    bool
	}{
		{"net_raw+ep without net_raw", capNetRawEP, grantedNoRaw, true},
		{"net_raw+ep with net_raw", capNetRawEP, grantedWithRaw, false},
		{"net_raw+p (not effective)", capNetRawP, grantedNoRaw, false},
		{"net_bind_service+ep", capBindEP, grantedNoRaw, false},
		{"truncated", capNetRawEP[:8], grantedNoRaw, false},
	} {
		if got := ungrantableCaps(c.v, c.granted); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTreesDropUngrantableCaps: a layer applied to a template tree keeps
// the file capabilities sandboxes can grant and drops the others.
func TestTreesDropUngrantableCaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting security.capability needs CAP_SETFCAP")
	}
	files := map[string][]byte{"usr/bin/ping": capNetRawEP, "usr/bin/aware": capNetRawP, "usr/bin/web": capBindEP, "usr/bin/plain": nil}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for rel, caps := range files {
		h := &tar.Header{Name: rel, Mode: 0o755, Size: 10, Format: tar.FormatPAX}
		if caps != nil {
			h.PAXRecords = map[string]string{"SCHILY.xattr." + xattrCaps: string(caps)}
		}
		must(t, tw.WriteHeader(h))
		tw.Write([]byte("#!/bin/sh\n\n"))
	}
	must(t, tw.Close())
	root := t.TempDir()
	opts := layer.ApplyOptions{KeepXattr: grantableOnly(grantedNoRaw)}
	st, err := layer.Apply(context.Background(), root, &buf, opts)
	must(t, err)
	if st.Dropped != 1 {
		t.Errorf("dropped %d attributes, want 1 (ping's)", st.Dropped)
	}
	checkOnlyPingLost(t, root, files)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestDropUngrantableCaps: a tree made on the host (mmdebstrap's) loses the
// file capabilities sandboxes cannot grant and keeps the others; symlinks
// are not followed.
func TestDropUngrantableCaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting security.capability needs CAP_SETFCAP")
	}
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "outside")
	must(t, os.WriteFile(outside, []byte("x"), 0o755))
	must(t, unix.Setxattr(outside, xattrCaps, capNetRawEP, 0))
	files := map[string][]byte{"usr/bin/ping": capNetRawEP, "usr/bin/aware": capNetRawP, "usr/bin/web": capBindEP, "usr/bin/plain": nil}
	for rel, caps := range files {
		p := filepath.Join(root, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
		if caps != nil {
			must(t, unix.Setxattr(p, xattrCaps, caps, 0))
		}
	}
	must(t, os.Symlink(outside, filepath.Join(root, "usr/bin/link")))
	n, err := dropUngrantableCaps(root, grantedNoRaw)
	if err != nil || n != 1 {
		t.Fatalf("dropUngrantableCaps = %d, %v; want 1 (ping's)", n, err)
	}
	checkOnlyPingLost(t, root, files)
	if _, err := unix.Getxattr(outside, xattrCaps, make([]byte, 64)); err != nil {
		t.Errorf("a symlink's target lost its capabilities: %v", err)
	}
}

// checkOnlyPingLost checks that of files (path under root -> capabilities
// set) only usr/bin/ping lost its capabilities.
func checkOnlyPingLost(t *testing.T, root string, files map[string][]byte) {
	t.Helper()
	for rel, caps := range files {
		b := make([]byte, 64)
		n, err := unix.Getxattr(filepath.Join(root, rel), xattrCaps, b)
		kept := err == nil && slices.Equal(b[:n], caps)
		if want := caps != nil && rel != "usr/bin/ping"; kept != want {
			t.Errorf("%s: capabilities kept %v (%v), want %v", rel, kept, err, want)
		}
	}
}
