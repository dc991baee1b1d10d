package outbound

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFromHost(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://proxy:3128")
	t.Setenv("no_proxy", "localhost")
	t.Setenv("HTTP_PROXY", "")
	s, err := FromHost("none")
	if err != nil || s.CABundle != "" || s.ProxyEnv["HTTPS_PROXY"] != "http://proxy:3128" || s.ProxyEnv["no_proxy"] != "localhost" || len(s.ProxyEnv) != 2 {
		t.Fatalf("FromHost(none) = %+v, %v", s, err)
	}
	pem := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(pem, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
	if s, err := FromHost(pem); err != nil || s.CABundle != pem {
		t.Errorf("FromHost(file) = %+v, %v", s, err)
	}
	for _, bad := range []string{filepath.Join(t.TempDir(), "missing"), t.TempDir()} {
		if _, err := FromHost(bad); err == nil {
			t.Errorf("FromHost(%s) accepted", bad)
		}
	}
	if s, err := FromHost("host"); err != nil || (s.CABundle != "" && s.CABundle != HostCABundle) {
		t.Errorf("FromHost(host) = %+v, %v", s, err)
	}
}
