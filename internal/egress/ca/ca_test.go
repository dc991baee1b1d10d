package ca

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLeavesChainToTheCA(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca.key")
	a, err := LoadOrCreate(certPath, keyPath, "Cubby egress CA test")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(keyPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	again, err := LoadOrCreate(certPath, keyPath, "ignored")
	if err != nil || string(again.CertPEM()) != string(a.CertPEM()) {
		t.Fatalf("reload made another CA: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(a.CertPEM())
	for _, name := range []string{"api.example.test", "198.18.0.7"} {
		leaf, err := a.Leaf(name)
		if err != nil {
			t.Fatal(err)
		}
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: time.Now()})
		if err != nil {
			t.Fatalf("leaf for %s: %v", name, err)
		}
		if again, _ := a.Leaf(name); again != leaf {
			t.Fatalf("leaf for %s not cached", name)
		}
	}
	leaf, _ := a.Leaf("a.test")
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "b.test", Roots: roots}); err == nil {
		t.Fatal("a leaf must be valid for its own name only")
	}
	if err := os.Remove(certPath); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreate(certPath, keyPath, "x"); err == nil {
		t.Fatal("a key without its certificate must not be replaced silently")
	}
}
