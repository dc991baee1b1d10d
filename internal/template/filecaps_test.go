package template

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
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

func TestDropUngrantableCaps(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("setting security.capability needs CAP_SETFCAP")
	}
	root := t.TempDir()
	files := map[string][]byte{"usr/bin/ping": capNetRawEP, "usr/bin/aware": capNetRawP, "usr/bin/web": capBindEP, "usr/bin/plain": nil}
	for rel, caps := range files {
		p := filepath.Join(root, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755))
		if caps != nil {
			must(t, unix.Setxattr(p, xattrCaps, caps, 0))
		}
	}
	must(t, os.Symlink("/usr/bin/ping", filepath.Join(root, "usr/bin/link")))
	got, err := dropUngrantableCaps(root, grantedNoRaw)
	must(t, err)
	if !slices.Equal(got, []string{"/usr/bin/ping"}) {
		t.Fatalf("dropped %v, want [/usr/bin/ping]", got)
	}
	for rel, caps := range files {
		b := make([]byte, 64)
		n, err := unix.Getxattr(filepath.Join(root, rel), xattrCaps, b)
		kept := err == nil && slices.Equal(b[:n], caps)
		if want := caps != nil && rel != "usr/bin/ping"; kept != want {
			t.Errorf("%s: capabilities kept %v (%v), want %v", rel, kept, err, want)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
