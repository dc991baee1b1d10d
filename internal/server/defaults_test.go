package server

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/admission"
	"github.com/cubby-dev/cubby/internal/network"
)

// TestZeroConfigGetsDefaults: a zero Config (as a library caller of Run
// passes) gets exactly Defaults, and Defaults are the documented values.
func TestZeroConfigGetsDefaults(t *testing.T) {
	var c Config
	c.applyDefaults()
	if !reflect.DeepEqual(c, Defaults()) {
		t.Fatalf("zero Config became\n%+v\nwant Defaults()\n%+v", c, Defaults())
	}
	want := Config{
		Listen: "127.0.0.1:3000", DataDir: "/var/lib/cubby", Bridge: network.DefaultBridge,
		Subnet: netip.MustParsePrefix("10.77.0.0/16"), Runtime: "runc", MemoryMB: 1024, DefaultTemplate: "base",
		OutboundCA: "host", BuildConcurrency: 1, TemplateGCAge: 24 * time.Hour,
		Admission:         admission.Limits{TeamSandboxes: 100, CreateRate: 10, CreateBurst: 20},
		ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		Backend: BackendLocal, Kube: KubeConfig{ImagePullPolicy: "IfNotPresent"},
	}
	if !reflect.DeepEqual(Defaults(), want) {
		t.Fatalf("Defaults() =\n%+v\nwant the documented\n%+v", Defaults(), want)
	}
	if c.DisableUserns || c.Kube.HostUsers {
		t.Fatal("a zero Config runs sandboxes without user namespaces")
	}
}

// TestDefaultsKeepSetFields: given fields stay, NoLimit admission limits
// become package admission's zero (no limit), and the local backend derives
// the directories and the server memory cap.
func TestDefaultsKeepSetFields(t *testing.T) {
	dir := t.TempDir()
	c := Config{DataDir: dir, MemoryMB: 300, DefaultTemplate: "mine", Subnet: netip.MustParsePrefix("10.9.0.0/24"),
		Admission: admission.Limits{TeamSandboxes: NoLimit, CreateRate: NoLimit, CreateBurst: 3}}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.MemoryMB != 300 || c.DefaultTemplate != "mine" || c.Subnet.String() != "10.9.0.0/24" || c.Bridge != network.DefaultBridge {
		t.Errorf("set fields changed or defaults missing: %+v", c)
	}
	if a := c.Admission; a.TeamSandboxes != 0 || a.CreateRate != 0 || a.CreateBurst != 3 || a.ServerMemoryMB <= 0 {
		t.Errorf("admission = %+v, want no team and rate limits, burst 3, a server memory cap", a)
	}
	if c.TemplatesDir != filepath.Join(dir, "templates") || c.RunDir != DefaultRunDir(dir) || c.Progress != os.Stderr {
		t.Errorf("derived: templates %q run %q progress %v", c.TemplatesDir, c.RunDir, c.Progress)
	}
}
