package store

import (
	"context"
	"testing"
	"time"
)

func TestTemplateSnapshots(t *testing.T) {
	st, _ := openTest(t)
	ctx := context.Background()
	put := func(id, team, tmpl string, internal bool) {
		t.Helper()
		sn := Snapshot{ID: id, Team: team, SandboxID: "sbx" + id, TemplateID: tmpl, Mode: "filesystem", CreatedAt: time.Now(), Internal: internal}
		if _, err := st.PutSnapshot(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	put("a1", "t1", "tmplA", false)
	put("a2", "t2", "tmplA", false)
	put("a3", "t1", "tmplA", true) // a fork's capture: not counted
	put("b1", "t1", "tmplB", false)
	for tmpl, want := range map[string]int{"tmplA": 2, "tmplB": 1, "tmplC": 0} {
		if n, err := st.TemplateSnapshots(ctx, tmpl); err != nil || n != want {
			t.Errorf("TemplateSnapshots(%s) = %d, %v; want %d", tmpl, n, err, want)
		}
	}
	if err := st.DeleteSnapshot(ctx, "t2", "a2"); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.TemplateSnapshots(ctx, "tmplA"); n != 1 {
		t.Errorf("after a delete: %d, want 1", n)
	}
}
