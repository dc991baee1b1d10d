package dashboardtest

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/sdk"
)

// TestActions pauses and resumes a sandbox through the table's form, checks
// a paused sandbox's files are refused rather than silently resumed, and
// kills two sandboxes at once with "Kill selected".
func TestActions(t *testing.T) {
	a, b := create(t, "base", map[string]string{"batch": "actions"}), create(t, "base", map[string]string{"batch": "actions"})
	c, token := httpLogin(t, srv.Key)
	act := func(form url.Values) string {
		form.Set("csrf", token)
		form.Set("back", "/dashboard/sandboxes?metadata=batch%3Dactions")
		resp := must(c.PostForm(srv.URL("/dashboard/sandboxes/actions"), form))
		read(resp)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("%v: %d", form, resp.StatusCode)
		}
		return get(t, c, resp.Header.Get("Location"))
	}
	state := func(id string) sdk.SandboxState {
		info, err := sdk.GetInfo(context.Background(), id, new(srv.Conn()))
		if err != nil {
			return ""
		}
		return info.State
	}
	if page := act(url.Values{"do": {"pause:" + a.ID()}}); !strings.Contains(page, "Paused sandbox "+a.ID()) || state(a.ID()) != sdk.StatePaused {
		t.Fatalf("pause: state %q", state(a.ID()))
	}
	resp := must(c.Get(srv.URL("/dashboard/api/sandboxes/" + a.ID() + "/files")))
	if body := read(resp); resp.StatusCode != http.StatusConflict || !strings.Contains(body, "paused") || state(a.ID()) != sdk.StatePaused {
		t.Fatalf("files of a paused sandbox: %d %s (state %q)", resp.StatusCode, body, state(a.ID()))
	}
	if page := act(url.Values{"do": {"resume:" + a.ID()}}); !strings.Contains(page, "Resumed sandbox "+a.ID()) || state(a.ID()) != sdk.StateRunning {
		t.Fatalf("resume: state %q", state(a.ID()))
	}
	page := act(url.Values{"do": {"kill-selected"}, "ids": {a.ID(), b.ID()}})
	if !strings.Contains(page, "Killed 2 sandboxes.") || !strings.Contains(page, "No sandbox matches.") {
		t.Fatalf("bulk kill: page does not say so")
	}
	for _, id := range []string{a.ID(), b.ID()} {
		if _, err := sdk.GetInfo(context.Background(), id, new(srv.Conn())); !errors.Is(err, sdk.ErrNotFound) {
			t.Fatalf("%s after the bulk kill: %v", id, err)
		}
	}
	if page := act(url.Values{"do": {"kill-selected"}}); !strings.Contains(page, "Select at least one sandbox.") {
		t.Fatal("kill-selected without a selection")
	}
}
