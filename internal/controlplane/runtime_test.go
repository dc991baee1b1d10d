package controlplane

import (
	"testing"

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
