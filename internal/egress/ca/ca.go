// Package ca is the egress proxy's certificate authority: one per server, made
// on first start (ECDSA P-256, self-signed, 10 years; the key stays in the
// data dir, mode 0600). Sandboxes whose network rules need HTTPS requests
// rewritten trust its certificate; the proxy terminates their TLS with leaf
// certificates it signs on the fly for the server name asked (RFC 5280
// profile: serverAuth, the name as the only SAN).
package ca

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"sync"
	"time"
)

// Lifetimes of certificates.
const (
	caLifetime   = 10 * 365 * 24 * time.Hour
	leafLifetime = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour // a cached leaf this close to expiry is made anew
	backdate     = time.Hour      // NotBefore is this far in the past (sandbox clocks may lag)
	maxLeaves    = 4096           // cached leaf certificates; the cache is emptied beyond
)

// Authority signs leaf certificates. It is safe for concurrent use.
type Authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// LoadOrCreate loads the CA from certPath and keyPath (PEM), creating both
// (certificate 0644, key 0600) when neither exists. name goes into the
// certificate's subject. Errors: only one file exists, or they do not parse.
func LoadOrCreate(certPath, keyPath, name string) (*Authority, error) {
	_, errC := os.Stat(certPath)
	_, errK := os.Stat(keyPath)
	if errors.Is(errC, fs.ErrNotExist) && errors.Is(errK, fs.ErrNotExist) {
		if err := create(certPath, keyPath, name); err != nil {
			return nil, err
		}
	}
	return Load(certPath, keyPath)
}

// Load reads a CA made by LoadOrCreate.
func Load(certPath, keyPath string) (*Authority, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("egress CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("egress CA key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("egress CA %s: %w", certPath, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("egress CA %s: %w", certPath, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, fmt.Errorf("egress CA %s: not a CA certificate with a signing key", certPath)
	}
	return &Authority{cert: cert, certPEM: certPEM, key: signer, leaves: map[string]*tls.Certificate{}}, nil
}

func create(certPath, keyPath, name string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	tpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name, Organization: []string{"Cubby"}},
		NotBefore: now.Add(-backdate), NotAfter: now.Add(caLifetime),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true, IsCA: true,
		MaxPathLenZero: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("create egress CA: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("write egress CA key: %w", err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("write egress CA certificate: %w", err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("ca: no randomness: " + err.Error())
	}
	return n
}

// CertPEM returns the CA certificate (PEM), what sandboxes install.
func (a *Authority) CertPEM() []byte { return a.certPEM }

// Leaf returns a certificate for name (a DNS name, or an IPv4 address as an IP
// SAN) signed by the CA, from the cache when one is valid for another day.
func (a *Authority) Leaf(name string) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.leaves[name]; ok && time.Until(c.Leaf.NotAfter) > leafRenew {
		return c, nil
	}
	c, err := a.sign(name)
	if err != nil {
		return nil, err
	}
	if len(a.leaves) >= maxLeaves {
		clear(a.leaves)
	}
	a.leaves[name] = c
	return c, nil
}

func (a *Authority) sign(name string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(leafLifetime)
	if notAfter.After(a.cert.NotAfter) {
		notAfter = a.cert.NotAfter
	}
	tpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-backdate), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		tpl.IPAddresses = append(tpl.IPAddresses, ip.AsSlice())
	} else {
		tpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("sign certificate for %q: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}
