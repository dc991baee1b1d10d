package mountinfo

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	const text = `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:5 master:1 - cgroup2 cgroup2 rw
99 27 0:50 / /tmp/a\040b\134c rw - overlay overlay rw,lowerdir=/l,upperdir=/u
`
	ms, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 3 {
		t.Fatalf("got %d mounts", len(ms))
	}
	if m := ms[1]; m.ID != 41 || m.Parent != 31 || m.FSType != "cgroup2" || m.Point != "/sys/fs/cgroup/unified" {
		t.Errorf("optional fields mis-parsed: %+v", m)
	}
	if m := ms[2]; m.Point != `/tmp/a b\c` || m.FSType != "overlay" || !m.HasSuperOpt("upperdir=/u") {
		t.Errorf("escapes mis-parsed: %+v", m)
	}
	if ms[0].Source != "/dev/vda" || ms[0].MajorMinor != "254:0" || !ms[0].HasSuperOpt("discard") || ms[0].HasSuperOpt("dis") {
		t.Errorf("%+v", ms[0])
	}
	if _, err := Parse(strings.NewReader("1 2 3\n")); err == nil {
		t.Error("malformed line accepted")
	}
}

func TestReadSelf(t *testing.T) {
	ms, err := Read(SelfPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Point == "/" {
			return
		}
	}
	t.Error("no root mount in", SelfPath)
}

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/tmp/a\040b`: "/tmp/a b", `/x\134y`: `/x\y`, `/p\011q`: "/p\tq", `/plain`: "/plain", `/end\04`: `/end\04`} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
