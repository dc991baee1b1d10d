package template

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestBuildLogRecordedAndRead records output through the recorder as a build
// does, commits a tree with it and reads it back by name and build ID; a tree
// without a log, unknown builds and malformed build IDs are told apart.
func TestBuildLogRecordedAndRead(t *testing.T) {
	m := NewManager(t.TempDir(), nil)
	d := Definition{Name: "logged"}.withDefaults()
	digest, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	tree := stageTree(t, m, "x")
	rec := newBuildRecorder()
	fmt.Fprint(rec, "[1/3] first step\r\nsecond li")
	fmt.Fprint(rec, "ne\nunterminated")
	if err := rec.writeTo(tree); err != nil {
		t.Fatal(err)
	}
	info, err := m.commit(context.Background(), d, IDFor(d.Name), digest, tree)
	if err != nil {
		t.Fatal(err)
	}
	if info.BuildID() != digest {
		t.Fatalf("BuildID = %q, want the digest %q", info.BuildID(), digest)
	}
	got, err := m.BuildLog("logged", info.BuildID())
	if err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, e := range got {
		if e.Level != "info" || e.Time.IsZero() {
			t.Errorf("entry %+v: want level info and a time", e)
		}
		msgs = append(msgs, e.Message)
	}
	if want := "[1/3] first step|second line|unterminated"; strings.Join(msgs, "|") != want {
		t.Fatalf("log = %q, want %q", strings.Join(msgs, "|"), want)
	}

	other := commitDef(t, m, Definition{Name: "nolog"}, "y")
	if got, err := m.BuildLog(other.ID, other.BuildID()); err != nil || got != nil {
		t.Fatalf("tree without a log: %v, %v; want nil, nil", got, err)
	}
	for _, c := range []struct{ tpl, build string }{
		{"logged", strings.Repeat("a", 32)}, {"logged", "../" + digest}, {"logged", ""}, {"missing", digest},
	} {
		if _, err := m.BuildLog(c.tpl, c.build); !errors.Is(err, ErrNotFound) {
			t.Errorf("BuildLog(%q, %q) = %v, want ErrNotFound", c.tpl, c.build, err)
		}
	}
}

// TestBuildRecorderCaps keeps the last maxBuildLogLines lines, cuts long lines
// and says how many were dropped.
func TestBuildRecorderCaps(t *testing.T) {
	rec := newBuildRecorder()
	rec.now = func() time.Time { return time.Unix(1, 0) }
	for i := range maxBuildLogLines + 5 {
		fmt.Fprintf(rec, "line %d\n", i)
	}
	fmt.Fprint(rec, strings.Repeat("z", maxBuildLogLine+10))
	if len(rec.entries) != maxBuildLogLines || rec.dropped != 6 {
		t.Fatalf("kept %d, dropped %d", len(rec.entries), rec.dropped)
	}
	if rec.entries[0].Message != "line 6" {
		t.Fatalf("oldest kept = %q, want line 6", rec.entries[0].Message)
	}
	last := rec.entries[len(rec.entries)-1].Message
	if !strings.HasSuffix(last, "…") || len(last) > maxBuildLogLine+len("…") {
		t.Fatalf("long line kept as %d bytes", len(last))
	}
}
