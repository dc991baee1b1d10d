package cli

import (
	"strings"
	"testing"
	"time"
)

// keyInfo is the --json form of an API key.
type keyInfo struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Mask      string     `json:"mask"`
	Key       string     `json:"key"`
	RevokedAt *time.Time `json:"revokedAt"`
}

// TestKeysDataDir manages keys in a fresh data directory.
func TestKeysDataDir(t *testing.T) {
	s := need(t)
	dir := t.TempDir()
	r := s.cli(t, runOpts{}, "keys", "list", "--data-dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "no Cubby database") {
		t.Errorf("list without a database: %s", r)
	}
	created := decode[keyInfo](t, s.ok(t, "keys", "create", "--name", "ci", "--json", "--data-dir", dir))
	if !strings.HasPrefix(created.Key, "e2b_") || len(created.Key) != 44 || created.Name != "ci" ||
		created.Mask != "e2b_…"+created.Key[40:] {
		t.Fatalf("create --json: %+v", created)
	}
	r = s.cli(t, runOpts{}, "keys", "create", "--data-dir", dir)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "e2b_") || !strings.Contains(r.stderr, "shown only now") {
		t.Errorf("create: %s", r)
	}
	list := decode[[]keyInfo](t, s.ok(t, "keys", "list", "--json", "--data-dir", dir))
	if len(list) != 2 || list[0].ID != created.ID || list[0].Key != "" || list[0].RevokedAt != nil {
		t.Fatalf("list --json: %+v", list)
	}
	if out := s.ok(t, "keys", "revoke", created.ID, "--data-dir", dir); out != "revoked "+created.ID+"\n" {
		t.Errorf("revoke: %q", out)
	}
	list = decode[[]keyInfo](t, s.ok(t, "keys", "list", "--json", "--data-dir", dir))
	if list[0].RevokedAt == nil || list[1].RevokedAt != nil {
		t.Errorf("after revoke: %+v", list)
	}
	table := s.ok(t, "keys", "list", "--data-dir", dir)
	if !strings.Contains(table, created.ID) || !strings.Contains(table, created.Mask) || strings.Contains(table, created.Key) {
		t.Errorf("list table:\n%s", table)
	}
	r = s.cli(t, runOpts{}, "keys", "revoke", "key_nosuch", "--data-dir", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "no API key with ID key_nosuch") {
		t.Errorf("revoke unknown: %s", r)
	}
}

// TestKeysLiveServer creates a key in the running server's data directory,
// uses it, revokes it and sees it rejected.
func TestKeysLiveServer(t *testing.T) {
	s := need(t)
	k := decode[keyInfo](t, s.ok(t, "keys", "create", "--name", "live", "--json", "--data-dir", s.DataDir))
	env := []string{"E2B_API_KEY=" + k.Key, "E2B_API_URL=http://" + s.Addr}
	if r := s.cli(t, runOpts{env: env}, "sandbox", "list"); r.code != 0 {
		t.Fatalf("list with a new key: %s", r)
	}
	s.ok(t, "keys", "revoke", k.ID, "--data-dir", s.DataDir)
	r := s.cli(t, runOpts{env: env}, "sandbox", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "E2B_API_KEY") {
		t.Errorf("list with a revoked key: %s", r)
	}
}

// TestTemplateCommands checks `template list` and `template build` with --json
// against the shared templates directory (build is a cache hit when the base
// template is current, as after `make templates`).
func TestTemplateCommands(t *testing.T) {
	s := need(t)
	if !s.hasTemplate(t, "base") {
		t.Fatalf("template list --json has no base template in %s", s.TemplatesDir)
	}
	table := s.ok(t, "template", "list", "--templates-dir", s.TemplatesDir)
	if !strings.HasPrefix(table, "NAME") || !strings.Contains(table, "base") {
		t.Errorf("template list:\n%s", table)
	}
	r := s.cli(t, runOpts{}, "template", "build", "base", "--json", "--templates-dir", s.TemplatesDir)
	if r.code != 0 {
		t.Fatalf("template build base --json: %s", r)
	}
	info := decode[struct {
		ID, Name, RootfsDir string
	}](t, r.stdout)
	if info.Name != "base" || info.ID == "" || info.RootfsDir == "" {
		t.Errorf("template build --json: %+v", info)
	}
	r = s.cli(t, runOpts{}, "template", "build", "no-such-builtin", "--templates-dir", s.TemplatesDir)
	if r.code != 1 || !strings.Contains(r.stderr, "built-ins") {
		t.Errorf("unknown template: %s", r)
	}
}

// TestKeysTeams creates a key of another team in the running server's data
// directory: it lists only its team's sandboxes, and `keys list` shows teams.
func TestKeysTeams(t *testing.T) {
	s := need(t)
	type teamKey struct {
		keyInfo
		Team string `json:"team"`
	}
	k := decode[teamKey](t, s.ok(t, "keys", "create", "--name", "acme-ci", "--team", "acme", "--json", "--data-dir", s.DataDir))
	if k.Team != "acme" || !strings.HasPrefix(k.Key, "e2b_") {
		t.Fatalf("create --team --json: %+v", k)
	}
	list := decode[[]teamKey](t, s.ok(t, "keys", "list", "--json", "--data-dir", s.DataDir))
	teams := map[string]string{}
	for _, l := range list {
		teams[l.ID] = l.Team
	}
	if teams[k.ID] != "acme" {
		t.Fatalf("list --json teams: %v", teams)
	}
	table := s.ok(t, "keys", "list", "--data-dir", s.DataDir)
	if !strings.Contains(table, "TEAM") || !strings.Contains(table, "acme") {
		t.Errorf("list table:\n%s", table)
	}
	id := strings.TrimSpace(s.ok(t, "sandbox", "create", "--template", "base"))
	defer s.ok(t, "sandbox", "kill", id)
	env := []string{"E2B_API_KEY=" + k.Key, "E2B_API_URL=http://" + s.Addr}
	if r := s.cli(t, runOpts{env: env}, "sandbox", "list"); r.code != 0 || strings.Contains(r.stdout, id) {
		t.Errorf("the acme team lists the default team's sandbox: %s", r)
	}
	if r := s.cli(t, runOpts{env: env}, "sandbox", "kill", id); r.code == 0 {
		t.Errorf("the acme team killed the default team's sandbox: %s", r)
	}
	r := s.cli(t, runOpts{}, "keys", "create", "--team", "Not A Team", "--data-dir", s.DataDir)
	if r.code != 1 || !strings.Contains(r.stderr, "invalid team name") {
		t.Errorf("create with a bad team: %s", r)
	}
}
