package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuildLogRecordedAndRead: a build keeps its log (the entries its caller
// saw), readable by template and build ID; failed builds keep theirs too;
// legacy trees' logs are read where they kept them; unknown and malformed
// build IDs are not found.
func TestBuildLogRecordedAndRead(t *testing.T) {
	m := newManager(t)
	base := fakeBuild(t, m, "logbase", nil, []string{DefaultTag}, "base")
	b, err := NewBuilder(BuilderConfig{Manager: m})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	req := Request{TemplateID: IDFor("logged"), Name: "logged", BuildID: NewBuildID(), Log: func(e Entry) { seen = append(seen, e.Message) },
		Spec: Spec{From: Source{Template: "logbase"}, Steps: []Step{{Type: StepEnv, Args: []string{"K", "v"}}}}}
	info, err := b.Build(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.BuildLog("logged", info.BuildID)
	if err != nil || len(got) != len(seen) || len(got) == 0 {
		t.Fatalf("log = %v, %v; the build logged %q", got, err, seen)
	}
	for i, e := range got {
		if e.Message != seen[i] || e.Time.IsZero() || e.Level == "" {
			t.Errorf("entry %d = %+v, want %q with a time and level", i, e, seen[i])
		}
	}
	failed := Request{TemplateID: IDFor("broken"), Name: "broken", BuildID: NewBuildID(), Spec: Spec{From: Source{Template: "nope"}}}
	if _, err := b.Build(context.Background(), failed); err == nil {
		t.Fatal("a build from a missing template succeeded")
	}
	if log, _ := m.BuildLogByID(failed.BuildID); len(log) == 0 || !strings.HasPrefix(log[len(log)-1].Message, "Build failed:") {
		t.Errorf("failed build log = %+v", log)
	}
	for _, c := range []struct{ tpl, build string }{
		{"logged", base.BuildID}, {"logged", "../" + info.BuildID}, {"logged", ""}, {"missing", info.BuildID},
	} {
		if _, err := m.BuildLog(c.tpl, c.build); !errors.Is(err, ErrNotFound) {
			t.Errorf("BuildLog(%q, %q) = %v, want ErrNotFound", c.tpl, c.build, err)
		}
	}
	legacyLog(t, m)
}

// legacyLog: a tree of an earlier version is read with the build.log it kept.
func legacyLog(t *testing.T, m *Manager) {
	t.Helper()
	id, tree := IDFor("old"), "0eeac879eb88f6ec230d0949cd249fed"
	dir := filepath.Join(m.dir, id, tree)
	write(t, filepath.Join(dir, "rootfs", "etc", "marker"), "x", 0o644)
	write(t, filepath.Join(dir, legacyInfo), `{"id":"`+id+`","name":"old","aliases":["old"]}`, 0o644)
	write(t, filepath.Join(dir, legacyBuildLog), `{"timestamp":"2026-01-01T00:00:00Z","level":"info","message":"old line"}`+"\n", 0o644)
	if err := os.Symlink(tree, filepath.Join(m.dir, id, legacyCurrent)); err != nil {
		t.Fatal(err)
	}
	got, err := m.BuildLog("old", tree)
	if err != nil || len(got) != 1 || got[0].Message != "old line" {
		t.Errorf("legacy log = %+v, %v", got, err)
	}
}

// TestBuildRecorderCaps keeps the last maxBuildLogLines entries, cuts long
// messages and says how many were dropped.
func TestBuildRecorderCaps(t *testing.T) {
	rec := newBuildRecorder()
	for i := range maxBuildLogLines + 5 {
		rec.add(Entry{Time: time.Unix(1, 0), Level: LevelInfo, Message: "line " + strings.Repeat("x", i%3) + string(rune('a'+i%26))})
	}
	rec.add(Entry{Time: time.Unix(1, 0), Level: LevelInfo, Message: strings.Repeat("z", maxBuildLogLine+10)})
	if len(rec.entries) != maxBuildLogLines || rec.dropped != 6 {
		t.Fatalf("kept %d, dropped %d", len(rec.entries), rec.dropped)
	}
	last := rec.entries[len(rec.entries)-1].Message
	if !strings.HasSuffix(last, "…") || len(last) > maxBuildLogLine+len("…") {
		t.Fatalf("long line kept as %d bytes", len(last))
	}
	path := filepath.Join(t.TempDir(), "logs", "b.jsonl")
	if err := rec.writeFile(path); err != nil {
		t.Fatal(err)
	}
	got, err := readBuildLog(path)
	if err != nil || len(got) != maxBuildLogLines+1 || !strings.Contains(got[0].Message, "6 earlier lines not kept") {
		t.Fatalf("written log: %d entries, %v", len(got), err)
	}
}
