// Package outbound holds what reaching package registries from sandboxes
// takes on hosts that only get out through an HTTP(S) proxy or a
// TLS-intercepting gateway with its own CA: the proxy variables and the CA
// bundle the server passes to template build steps (always) and to
// sandboxes (when the operator allows it).
package outbound

import (
	"errors"
	"fmt"
	"os"
)

// HostCABundle is Debian's CA bundle (update-ca-certificates output, which
// includes the host's local CAs from /usr/local/share/ca-certificates).
const HostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// ProxyVars are the proxy variables passed on, both spellings.
var ProxyVars = []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"}

// Settings is what sandboxes get.
type Settings struct {
	// CABundle is a host PEM bundle mounted read-only into sandboxes (at
	// agentapi.CABundlePath) and named by the CA variables; "" = none.
	CABundle string
	// ProxyEnv holds the proxy variables set in the server's environment.
	ProxyEnv map[string]string
}

// Zero reports whether s passes nothing.
func (s Settings) Zero() bool { return s.CABundle == "" && len(s.ProxyEnv) == 0 }

// FromHost reads the settings of this host: the proxy variables of the
// server's environment and the CA bundle ca names ("host" = HostCABundle
// when it exists, "" or "none" = none, else a path that must exist).
func FromHost(ca string) (Settings, error) {
	s := Settings{ProxyEnv: map[string]string{}}
	for _, k := range ProxyVars {
		if v, ok := os.LookupEnv(k); ok && v != "" {
			s.ProxyEnv[k] = v
		}
	}
	switch ca {
	case "", "none":
	case "host":
		if _, err := os.Stat(HostCABundle); err == nil {
			s.CABundle = HostCABundle
		} else if !errors.Is(err, os.ErrNotExist) {
			return Settings{}, fmt.Errorf("CA bundle %s: %w", HostCABundle, err)
		}
	default:
		fi, err := os.Stat(ca)
		if err != nil {
			return Settings{}, fmt.Errorf("CA bundle: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return Settings{}, fmt.Errorf("CA bundle %s is not a regular file", ca)
		}
		s.CABundle = ca
	}
	return s, nil
}
