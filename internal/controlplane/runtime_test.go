package controlplane

import (
	"log/slog"
	"testing"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/store"
)

// TestCreateRequestRuntime: the template's runtime reaches the backend; a
// template without one leaves the choice to the backend's default.
func TestCreateRequestRuntime(t *testing.T) {
	s := &Service{}
	for _, rt := range []string{"runsc", "runc", ""} {
		ref := TemplateRef{ID: "tpl", Alias: "base", RootfsDir: "/r", Runtime: rt}
		req := s.createRequest(store.Sandbox{ID: "sbx"}, ref, createSpec{})
		if req.Runtime != rt || req.TemplateID != "tpl" || req.RootfsDir != "/r" {
			t.Fatalf("template runtime %q: request %+v", rt, req)
		}
	}
}

// defaultRuntime is a backend whose default runtime is name.
type defaultRuntime struct {
	backend.Backend
	name string
}

func (d defaultRuntime) DefaultRuntime() string { return d.name }

// TestCreateRequestReadySnapshot: a create from a template with a ready
// snapshot restores it when it runs under the snapshot's runtime without
// volumes, keeping the start command for boots from disk; otherwise (other
// runtime, volumes, no snapshot) it runs the start command, and a create
// from a user's snapshot keeps that snapshot.
func TestCreateRequestReadySnapshot(t *testing.T) {
	ref := TemplateRef{ID: "tpl", RootfsDir: "/r", StartCmd: "serve", ReadyCmd: "check", Snapshot: "tmpl1", SnapshotRuntime: "runsc"}
	noSnap := ref
	noSnap.Snapshot, noSnap.SnapshotRuntime = "", ""
	runc := ref
	runc.Runtime = "runc"
	vol := []backend.VolumeMount{{ID: "v", Path: "/data"}}
	for _, c := range []struct {
		name, def string
		ref       TemplateRef
		sp        createSpec
		want      string
	}{
		{"restored", "runsc", ref, createSpec{}, "tmpl1"},
		{"server runs runc", "runc", ref, createSpec{}, ""},
		{"template asks for runc", "runsc", runc, createSpec{}, ""},
		{"volumes", "runsc", ref, createSpec{volumes: vol}, ""},
		{"no snapshot", "runsc", noSnap, createSpec{}, ""},
		{"a user's snapshot", "runsc", ref, createSpec{snapshot: "user1"}, "user1"},
	} {
		s := &Service{backend: defaultRuntime{name: c.def}, log: slog.New(slog.DiscardHandler)}
		req := s.createRequest(store.Sandbox{ID: "sbx"}, c.ref, c.sp)
		if req.Snapshot != c.want || req.Start == nil || req.Start.Cmd != "serve" {
			t.Errorf("%s: snapshot %q (want %q), start %+v", c.name, req.Snapshot, c.want, req.Start)
		}
	}
}
