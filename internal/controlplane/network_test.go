package controlplane

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/egress/policy"
)

// lastEgress returns what SetEgress last got for id and whether it was called.
func (f *fakeBackend) lastEgress(id string) (*policy.Policy, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.egress[id]
	return p, ok
}

func TestSecretsLifecycleAndTenancy(t *testing.T) {
	h := newHarness(t, Config{})
	const value = "sk-live-5f0c8e1d2b7a"
	r := h.do("POST", "/secrets", map[string]any{"name": "OpenAI-Key", "value": value, "metadata": map[string]string{"env": "prod"}})
	if r.status != http.StatusCreated || bytes.Contains(r.body, []byte(value)) {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var sec struct {
		SecretID, Name string
		CurrentVersion int
		Metadata       map[string]string
	}
	r.json(t, &sec)
	if !strings.HasPrefix(sec.SecretID, "sec_") || sec.Name != "openai-key" || sec.CurrentVersion != 1 || sec.Metadata["env"] != "prod" {
		t.Fatalf("created secret %+v", sec)
	}
	wantError(t, h.do("POST", "/secrets", map[string]any{"name": "openai-key", "value": "x"}), http.StatusConflict)
	for _, bad := range []map[string]any{{"name": "a{b}", "value": "x"}, {"name": "sec_x", "value": "x"}, {"name": "n", "value": ""},
		{"name": "n", "value": "a\nb"}, {"name": "n"}} {
		wantError(t, h.do("POST", "/secrets", bad), http.StatusBadRequest)
	}
	for _, key := range []string{sec.SecretID, "OPENAI-KEY"} {
		if r := h.do("GET", "/secrets/"+key, nil); r.status != 200 || bytes.Contains(r.body, []byte(value)) {
			t.Fatalf("get %s: %d %s", key, r.status, r.body)
		}
	}
	r = h.do("POST", "/secrets/"+sec.SecretID, map[string]any{"value": value + "-v2"})
	r.json(t, &sec)
	if r.status != 200 || sec.CurrentVersion != 2 || sec.Metadata["env"] != "prod" || bytes.Contains(r.body, []byte(value)) {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	other := h.teamKey("other")
	for _, req := range []struct{ method, path string }{{"GET", "/secrets/"}, {"POST", "/secrets/"}, {"DELETE", "/secrets/"}} {
		wantError(t, h.doKey(other, req.method, req.path+sec.SecretID, map[string]any{"value": "stolen"}), http.StatusNotFound)
	}
	if r := h.doKey(other, "GET", "/secrets", nil); r.status != 200 || string(bytes.TrimSpace(r.body)) != "[]" {
		t.Fatalf("another team lists %s", r.body)
	}
	if v, err := h.svc.SecretValue(t.Context(), "other", "openai-key"); err == nil {
		t.Fatalf("another team's rules resolve the secret: %q", v)
	}
	dbHolds := func(needle string) bool {
		for _, suffix := range []string{"", "-wal"} {
			b, _ := os.ReadFile(filepath.Join(filepath.Dir(h.dbPath), "cubby.db") + suffix)
			if bytes.Contains(b, []byte(needle)) {
				return true
			}
		}
		return false
	}
	if dbHolds(value) {
		t.Fatal("the secret value is stored in clear")
	}
	if r := h.do("DELETE", "/secrets/openai-key", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	wantError(t, h.do("GET", "/secrets/openai-key", nil), http.StatusNotFound)
}

func TestSecretsPagination(t *testing.T) {
	h := newHarness(t, Config{})
	for _, n := range []string{"c", "a", "b"} {
		if r := h.do("POST", "/secrets", map[string]any{"name": n, "value": "v"}); r.status != 201 {
			t.Fatalf("create %s: %d", n, r.status)
		}
	}
	var names []string
	next := ""
	for page := 0; page < 5; page++ {
		r := h.do("GET", "/secrets?limit=2&nextToken="+next, nil)
		var list []struct{ Name string }
		r.json(t, &list)
		for _, s := range list {
			names = append(names, s.Name)
		}
		if next = r.header.Get("X-Next-Token"); next == "" {
			break
		}
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Fatalf("pages gave %v", names)
	}
	wantError(t, h.do("GET", "/secrets?limit=0", nil), 400)
}

func TestCreateWithEgressPolicy(t *testing.T) {
	h := newHarness(t, Config{})
	if r := h.do("POST", "/secrets", map[string]any{"name": "key", "value": "sk-1"}); r.status != 201 {
		t.Fatalf("secret: %d", r.status)
	}
	id := h.create(map[string]any{"network": map[string]any{
		"allowOut": []string{"api.example.com", "*.pypi.org", "198.18.0.0/15"}, "denyOut": []string{"0.0.0.0/0"},
		"rules":       map[string]any{"api.example.com": []map[string]any{{"transform": map[string]any{"headers": map[string]string{"Authorization": "Bearer ${e2b.secrets.key}"}}}}},
		"egressProxy": map[string]string{"address": "socks.example.com:1080", "username": "u", "password": "pw-9d1e7c"},
		"httpsPorts":  []int{8443}, "maskRequestHost": "${PORT}-app.example.com",
	}})
	req := h.fake.lastCreate()
	p := req.Egress
	if p == nil || len(p.Domains) != 2 || len(p.Allow) != 1 || !p.DeniesAll() || p.Proxy == nil || p.Proxy.Password != "pw-9d1e7c" || req.NoInternet {
		t.Fatalf("backend got %+v (NoInternet %v)", p, req.NoInternet)
	}
	info := h.do("GET", "/sandboxes/"+id, nil)
	if bytes.Contains(info.body, []byte("pw-9d1e7c")) || !bytes.Contains(info.body, []byte(`"maskRequestHost":"${PORT}-app.example.com"`)) ||
		!bytes.Contains(info.body, []byte(`Bearer ${e2b.secrets.key}`)) {
		t.Fatalf("detail %s", info.body)
	}
	// A restart rebuilds the policy, the sealed password included.
	h.stop()
	h.start()
	if p, ok := h.fake.lastEgress(id); !ok || p.Proxy == nil || p.Proxy.Password != "pw-9d1e7c" || len(p.Rules) != 1 {
		t.Fatalf("restored policy %+v", p)
	}
}

func TestUpdateNetwork(t *testing.T) {
	h := newHarness(t, Config{})
	id := h.create(map[string]any{"network": map[string]any{"allowPublicTraffic": false, "maskRequestHost": "x.example.com",
		"denyOut": []string{"10.0.0.0/8"}}})
	put := func(key string, body any) response { return h.doKey(key, "PUT", "/sandboxes/"+id+"/network", body) }
	if r := put(h.key, map[string]any{"allowOut": []string{"allowed.test"}, "denyOut": []string{"0.0.0.0/0"}}); r.status != 204 {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	p, _ := h.fake.lastEgress(id)
	if p == nil || len(p.Domains) != 1 || !p.DeniesAll() {
		t.Fatalf("backend got %+v", p)
	}
	detail := string(h.do("GET", "/sandboxes/"+id, nil).body)
	if !strings.Contains(detail, `"allowOut":["allowed.test"]`) || !strings.Contains(detail, `"allowPublicTraffic":false`) ||
		!strings.Contains(detail, `"maskRequestHost":"x.example.com"`) || strings.Contains(detail, "10.0.0.0/8") {
		t.Fatalf("after update: %s", detail)
	}
	if r := put(h.key, map[string]any{}); r.status != 204 {
		t.Fatalf("clearing update: %d", r.status)
	}
	if p, _ := h.fake.lastEgress(id); p != nil {
		t.Fatalf("an empty update must clear the policy, backend got %+v", p)
	}
	msg := wantError(t, put(h.key, map[string]any{"denyOut": []string{"example.com"}}), 400)
	if !strings.Contains(msg, "network.denyOut[0]") {
		t.Fatalf("message %q", msg)
	}
	wantError(t, put(h.key, map[string]any{"rules": map[string]any{"a.test": []map[string]any{{"transform": map[string]any{
		"headers": map[string]string{"X": "${e2b.secrets.nope}"}}}}}}), 400)
	wantError(t, put(h.teamKey("other"), map[string]any{}), 404)
	h.pause(id, nil)
	wantError(t, put(h.key, map[string]any{}), 409)
}
