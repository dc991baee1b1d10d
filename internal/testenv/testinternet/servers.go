// Package testinternet provides the stand-ins for "the internet" that egress
// tests talk to: a test CA and server certificates, an echo server that
// answers with the request headers it got (and remembers them), a streaming
// endpoint, an authoritative DNS server for test names and a SOCKS5 proxy.
// Internet (internet.go) puts them in a network namespace of their own.
package testinternet

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// NewCA makes a CA valid for a day.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egress test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tpl, tpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Pool returns a pool holding only the CA.
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.Cert)
	return p
}

// ServerCert issues a certificate for names (DNS names; "*.x" wildcards allowed).
func (c *CA) ServerCert(names ...string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, c.Cert, &key.PublicKey, c.key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, c.Cert.Raw}, PrivateKey: key}, nil
}

// Echo is an HTTP handler that answers every request with JSON
// {"server","host","path","headers","digests"} (digests: the SHA-256, hex, of
// each header's value as received, so a test can check a value it must not
// see) and remembers the headers per Host.
//
// GET /stream?n=N&ms=M writes N lines, one every M milliseconds (a long-lived
// response for tests that cut connections); GET /bytes?n=N answers N bytes.
type Echo struct {
	Name string // added to every answer as "server"
	mu   sync.Mutex
	seen map[string][]http.Header
}

// Seen returns the headers of every request received for host, oldest first.
func (e *Echo) Seen(host string) []http.Header {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]http.Header(nil), e.seen[host]...)
}

// ServeHTTP implements http.Handler (see Echo).
func (e *Echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	if e.seen == nil {
		e.seen = map[string][]http.Header{}
	}
	e.seen[r.Host] = append(e.seen[r.Host], r.Header.Clone())
	e.mu.Unlock()
	switch r.URL.Path {
	case "/stream":
		e.stream(w, r)
		return
	case "/bytes":
		e.bytes(w, r)
		return
	}
	digests := map[string]string{}
	for k, v := range r.Header {
		sum := sha256.Sum256([]byte(strings.Join(v, ", ")))
		digests[k] = hex.EncodeToString(sum[:])
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"server": e.Name, "host": r.Host, "path": r.URL.Path, "headers": r.Header,
		"digests": digests})
}

// bytes answers GET /bytes?n=N with N bytes (a download for throughput).
func (e *Echo) bytes(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	buf := make([]byte, 64<<10)
	for n > 0 {
		k, err := w.Write(buf[:min(int64(len(buf)), n)])
		if err != nil {
			return
		}
		n -= int64(k)
	}
}

func (e *Echo) stream(w http.ResponseWriter, r *http.Request) {
	n, _ := strconv.Atoi(r.URL.Query().Get("n"))
	ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
	fl, _ := w.(http.Flusher)
	for i := 0; i < n; i++ {
		if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
}

// Names maps test host names to addresses (what the DNS server answers).
type Names map[string]netip.Addr
