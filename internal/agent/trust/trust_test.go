package trust

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

const pemA = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
const pemB = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n"

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestInstallReplaceRemove(t *testing.T) {
	root := t.TempDir()
	system := filepath.Join(root, systemBundle)
	certifi := filepath.Join(root, "/usr/local/lib/python3.11/dist-packages/certifi/cacert.pem")
	pip := filepath.Join(root, "/usr/lib/python3/dist-packages/pip/_vendor/certifi/cacert.pem")
	write(t, system, "system roots\n")
	write(t, certifi, "certifi roots\n")
	if err := os.MkdirAll(filepath.Dir(pip), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(system, pip); err != nil { // Debian points pip's bundle at the system one
		t.Fatal(err)
	}
	if err := Install(root, []byte(pemA)); err != nil {
		t.Fatal(err)
	}
	if err := Install(root, []byte(pemB)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{system, certifi} {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), "AAAA") || strings.Count(string(b), "BBBB") != 1 || !strings.Contains(string(b), "roots") {
			t.Fatalf("%s after two installs:\n%s", p, b)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, CertFile)); string(b) != pemB {
		t.Fatalf("cert file %q", b)
	}
	if err := Remove(root); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{system: "system roots\n", certifi: "certifi roots\n"} {
		if b, _ := os.ReadFile(p); string(b) != want {
			t.Fatalf("%s after Remove: %q", p, b)
		}
	}
	if _, err := os.Stat(filepath.Join(root, CertFile)); !os.IsNotExist(err) {
		t.Fatalf("cert file left: %v", err)
	}
	if err := Install(root, []byte("not pem")); err == nil {
		t.Fatal("garbage installed")
	}
}

// A sandbox given the host's CA bundle trusts the egress CA through the
// variables that name that bundle too: they name a copy holding both.
func TestHostBundle(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, agentapi.CABundlePath), "host roots\n")
	if err := Install(root, []byte(pemA)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(root, HostBundleFile))
	if !strings.HasPrefix(string(b), "host roots\n") || strings.Count(string(b), "AAAA") != 1 {
		t.Fatalf("host bundle copy:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, agentapi.CABundlePath)); string(b) != "host roots\n" {
		t.Fatalf("host bundle itself changed: %q", b)
	}
	env := map[string]string{"SSL_CERT_FILE": agentapi.CABundlePath, "NODE_EXTRA_CA_CERTS": agentapi.CABundlePath, "OTHER": "x"}
	HostBundleEnv(env)
	if env["SSL_CERT_FILE"] != HostBundleFile || env["NODE_EXTRA_CA_CERTS"] != HostBundleFile || env["OTHER"] != "x" {
		t.Fatalf("env %v", env)
	}
	if err := Remove(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, HostBundleFile)); !os.IsNotExist(err) {
		t.Fatalf("host bundle copy left: %v", err)
	}
}
