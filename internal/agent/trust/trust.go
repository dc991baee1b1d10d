// Package trust adds a CA certificate to the trust stores of a Debian-like
// root filesystem, and takes it out again: the system bundle
// (/etc/ssl/certs/ca-certificates.crt, what OpenSSL, curl, wget, git and
// Python's ssl module read), the certificate directory update-ca-certificates
// reads (/usr/local/share/ca-certificates), the certifi bundles of Python
// packages (requests, httpx, pip) and, through Env, Node.js
// (NODE_EXTRA_CA_CERTS) and Deno (DENO_CERT), which read their own stores.
// The agent uses it for the server's egress CA (agentapi.InitRequest.EgressCA).
//
// A sandbox given the host's CA bundle (agentapi.CABundlePath, read-only,
// named by the variables of agentapi.CAEnv) gets a copy of it holding the
// certificate too, HostBundleFile, which those variables name instead while
// the certificate is installed (see HostBundleEnv).
package trust

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// Paths inside the root.
const (
	// CertFile is the CA certificate on its own (PEM).
	CertFile     = "/usr/local/share/ca-certificates/cubby-egress-ca.crt"
	systemBundle = "/etc/ssl/certs/ca-certificates.crt"
	// HostBundleFile is agentapi.CABundlePath joined with the certificate
	// (.pem: update-ca-certificates reads .crt files only).
	HostBundleFile = "/usr/local/share/ca-certificates/cubby-host-bundle.pem"
)

// certifiGlobs find the certifi bundles of Python installations.
var certifiGlobs = []string{
	"/usr/lib/python3/dist-packages/certifi/cacert.pem",
	"/usr/lib/python3/dist-packages/pip/_vendor/certifi/cacert.pem",
	"/usr/local/lib/python3*/*-packages/certifi/cacert.pem",
	"/usr/local/lib/python3*/*-packages/pip/_vendor/certifi/cacert.pem",
	"/usr/lib/python3*/site-packages/certifi/cacert.pem",
	"/opt/*/lib/python3*/site-packages/certifi/cacert.pem",
	"/home/*/.local/lib/python3*/site-packages/certifi/cacert.pem",
}

// Markers around the certificate in the bundles it is added to.
const (
	beginMark = "# cubby egress CA (begin)\n"
	endMark   = "# cubby egress CA (end)\n"
)

// Env returns the environment variables that make runtimes with their own
// stores trust CertFile.
func Env() map[string]string {
	return map[string]string{"NODE_EXTRA_CA_CERTS": CertFile, "DENO_CERT": CertFile}
}

// Install writes certPEM to CertFile under root and adds it to every bundle
// found (replacing an earlier one). Bundles that are missing are skipped;
// other failures are joined.
func Install(root string, certPEM []byte) error {
	if !bytes.Contains(certPEM, []byte("-----BEGIN CERTIFICATE-----")) {
		return errors.New("trust: not a PEM certificate")
	}
	path := filepath.Join(root, CertFile)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	if err := os.WriteFile(path, certPEM, 0o644); err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	if err := copyHostBundle(root); err != nil {
		return err
	}
	block := append(append([]byte(beginMark), bytes.TrimSpace(certPEM)...), '\n')
	block = append(block, endMark...)
	return eachBundle(root, func(data []byte) []byte { return append(strip(data), block...) })
}

// Remove takes the certificate out of every bundle and deletes CertFile;
// without a CertFile (nothing installed) it does nothing.
func Remove(root string) error {
	err := os.Remove(filepath.Join(root, CertFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	hostErr := os.Remove(filepath.Join(root, HostBundleFile))
	if errors.Is(hostErr, fs.ErrNotExist) {
		hostErr = nil
	}
	return errors.Join(err, hostErr, eachBundle(root, strip))
}

// copyHostBundle copies agentapi.CABundlePath to HostBundleFile when the
// sandbox has it (eachBundle then adds the certificate to the copy).
func copyHostBundle(root string) error {
	data, err := os.ReadFile(filepath.Join(root, agentapi.CABundlePath))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(root, HostBundleFile), data, 0o644)
	}
	if err != nil {
		return fmt.Errorf("trust: host CA bundle: %w", err)
	}
	return nil
}

// HostBundleEnv rewrites env in place: variables naming
// agentapi.CABundlePath name HostBundleFile instead (call it only while the
// certificate is installed).
func HostBundleEnv(env map[string]string) {
	for k, v := range env {
		if v == agentapi.CABundlePath {
			env[k] = HostBundleFile
		}
	}
}

// strip removes the marked block from a bundle.
func strip(data []byte) []byte {
	i := bytes.Index(data, []byte(beginMark))
	if i < 0 {
		return data
	}
	j := bytes.Index(data[i:], []byte(endMark))
	if j < 0 {
		return data[:i]
	}
	return append(append([]byte(nil), data[:i]...), data[i+j+len(endMark):]...)
}

// eachBundle rewrites every existing bundle (symlinks resolved, each target
// once) with edit, atomically and keeping its mode.
func eachBundle(root string, edit func([]byte) []byte) error {
	paths := []string{filepath.Join(root, systemBundle), filepath.Join(root, HostBundleFile)}
	for _, g := range certifiGlobs {
		m, _ := filepath.Glob(filepath.Join(root, g))
		paths = append(paths, m...)
	}
	seen := map[string]bool{}
	var errs []error
	for _, p := range paths {
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] || !strings.HasPrefix(real, filepath.Clean(root)) {
			continue
		}
		seen[real] = true
		if err := rewrite(real, edit); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func rewrite(path string, edit func([]byte) []byte) error {
	st, err := os.Stat(path)
	if err != nil {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	out := edit(data)
	if bytes.Equal(out, data) {
		return nil
	}
	tmp := path + ".cubby-tmp"
	if err := os.WriteFile(tmp, out, st.Mode().Perm()); err != nil {
		return fmt.Errorf("trust: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("trust: %w", err)
	}
	return nil
}
