package cli

import (
	"reflect"
	"testing"

	"github.com/cubby-dev/cubby/internal/admission"
	"github.com/cubby-dev/cubby/internal/server"
)

// TestServeFlagDefaults: `cubby serve` without flags configures exactly
// server.Defaults (the flags take their defaults from there).
func TestServeFlagDefaults(t *testing.T) {
	t.Setenv(envEgressResolver, "")
	t.Setenv(envEgressUpstreamCA, "")
	cmd, sf := serveCmd()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := sf.config(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, server.Defaults()) {
		t.Fatalf("serve's flags give\n%+v\nwant server.Defaults()\n%+v", cfg, server.Defaults())
	}
}

// TestServeNoLimitFlags: admission flags given as 0 are no limit, which the
// server's config says with NoLimit (its zero is the default).
func TestServeNoLimitFlags(t *testing.T) {
	cmd, sf := serveCmd()
	if err := cmd.ParseFlags([]string{"--team-max-sandboxes=0", "--create-rate=0", "--create-burst=0", "--userns=false", "--user-namespaces=false"}); err != nil {
		t.Fatal(err)
	}
	cfg, err := sf.config(cmd)
	if err != nil {
		t.Fatal(err)
	}
	want := admission.Limits{TeamSandboxes: server.NoLimit, CreateRate: server.NoLimit, CreateBurst: 1}
	if cfg.Admission != want || !cfg.DisableUserns || !cfg.Kube.HostUsers {
		t.Fatalf("admission %+v (want %+v), disable userns %v, host users %v", cfg.Admission, want, cfg.DisableUserns, cfg.Kube.HostUsers)
	}
}
