package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/store"
)

// portPlaceholder is what maskRequestHost may hold for the port.
const portPlaceholder = "${PORT}"

// netSettings is a validated network config: the egress policy, the config as
// stored and shown (credentials removed) and the proxy password to seal.
type netSettings struct {
	policy   *policy.Policy // nil when it restricts and changes nothing
	stored   json.RawMessage
	password string
}

// specOf converts a wire network config and allow_internet_access.
func specOf(n *api.SandboxNetworkConfig, allowInternet *bool) policy.Spec {
	s := policy.Spec{AllowInternet: allowInternet}
	if n == nil {
		return s
	}
	s.AllowOut, s.DenyOut = deref(n.AllowOut), deref(n.DenyOut)
	if n.Rules != nil {
		s.Rules = map[string][]policy.Transform{}
		for host, rules := range *n.Rules {
			list := make([]policy.Transform, 0, len(rules))
			for _, r := range rules {
				var t policy.Transform
				if r.Transform != nil && r.Transform.Headers != nil {
					t.Headers = *r.Transform.Headers
				}
				list = append(list, t)
			}
			s.Rules[host] = list
		}
	}
	if p := n.EgressProxy; p != nil {
		s.EgressProxy = &policy.Upstream{Address: p.Address, Username: deref(p.Username), Password: deref(p.Password)}
	}
	return s
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// parseNetwork validates a create's network config (400 naming the field)
// and returns its settings.
func parseNetwork(n *api.SandboxNetworkConfig, allowInternet *bool) (netSettings, error) {
	p, err := policy.Parse(specOf(n, allowInternet))
	if err != nil {
		return netSettings{}, badRequest(err.Error())
	}
	if err := validIngress(n); err != nil {
		return netSettings{}, err
	}
	ns := netSettings{policy: p}
	if p.IsZero() {
		ns.policy = nil
	}
	if n == nil {
		return ns, nil
	}
	view := *n
	if view.EgressProxy != nil {
		proxy := *view.EgressProxy
		ns.password, proxy.Password = deref(proxy.Password), nil
		view.EgressProxy = &proxy
	}
	if ns.stored, err = json.Marshal(view); err != nil {
		return netSettings{}, fmt.Errorf("encode network: %w", err)
	}
	return ns, nil
}

// validIngress checks the settings of requests into the sandbox: httpsPorts
// (1-65535, never envd's) and maskRequestHost (a host name, optionally with
// ${PORT}).
func validIngress(n *api.SandboxNetworkConfig) error {
	if n == nil {
		return nil
	}
	for i, port := range deref(n.HttpsPorts) {
		if port < 1 || port > 65535 || port == agentapi.EnvdPort {
			return badRequest(fmt.Sprintf("network.httpsPorts[%d]: %d is not a port 1-65535 other than envd's %d", i, port, agentapi.EnvdPort))
		}
	}
	if m := deref(n.MaskRequestHost); m != "" {
		host := strings.ReplaceAll(m, portPlaceholder, "1")
		if _, err := policy.ParsePattern("network.maskRequestHost", strings.Split(host, ":")[0]); err != nil {
			return badRequest(err.Error() + " (a host name; " + portPlaceholder + " stands for the port)")
		}
	}
	return nil
}

// ingressOf returns maskRequestHost and httpsPorts of a stored network config.
func ingressOf(stored json.RawMessage) (string, []int) {
	var n api.SandboxNetworkConfig
	if len(stored) == 0 || json.Unmarshal(stored, &n) != nil {
		return "", nil
	}
	var ports []int
	for _, p := range deref(n.HttpsPorts) {
		ports = append(ports, int(p))
	}
	return deref(n.MaskRequestHost), ports
}

// checkSecrets answers 400 when rules refer to secrets team does not have:
// a rule never sends an empty header for a missing secret.
func (s *Service) checkSecrets(ctx context.Context, team string, p *policy.Policy) error {
	if p == nil {
		return nil
	}
	missing, err := s.missingSecrets(ctx, team, p.Secrets())
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return badRequest(fmt.Sprintf("network.rules: secret %q does not exist (create it with POST /secrets first)", missing[0]))
	}
	return nil
}

// netSecretAD binds a sandbox's sealed network credentials to it.
func netSecretAD(id string) []byte { return []byte("network\x00" + id) }

// saveNetworkSecret stores a sandbox's proxy password sealed (nothing when empty).
func (s *Service) saveNetworkSecret(ctx context.Context, rec store.Sandbox, password string) error {
	if password == "" {
		return nil
	}
	if s.sealer == nil {
		return errors.New("network.egressProxy.password: the server has no secret key")
	}
	sealed := s.sealer.Seal([]byte(password), netSecretAD(rec.ID))
	return s.store.SetNetwork(ctx, rec.ID, rec.AllowInternetAccess, rec.Network, sealed)
}

// storedPolicy rebuilds a live sandbox's policy from its record (after a
// restart); nil when it has none.
func (s *Service) storedPolicy(ctx context.Context, r store.Sandbox) (*policy.Policy, error) {
	var n *api.SandboxNetworkConfig
	if len(r.Network) > 0 {
		n = &api.SandboxNetworkConfig{}
		if err := json.Unmarshal(r.Network, n); err != nil {
			return nil, fmt.Errorf("decode network of %s: %w", r.ID, err)
		}
	}
	spec := specOf(n, r.AllowInternetAccess)
	if spec.EgressProxy != nil && s.sealer != nil {
		sealed, err := s.store.NetworkSecret(ctx, r.ID)
		if err != nil {
			return nil, err
		}
		if sealed != nil {
			pw, err := s.sealer.Open(sealed, netSecretAD(r.ID))
			if err != nil {
				return nil, fmt.Errorf("network credentials of %s: %w", r.ID, err)
			}
			spec.EgressProxy.Password = string(pw)
		}
	}
	p, err := policy.Parse(spec)
	if err != nil || p.IsZero() {
		return nil, err
	}
	return p, nil
}

// restoreEgress gives an adopted sandbox its policy again (nftables kept it
// across the restart; the egress proxy starts empty and refuses meanwhile).
func (s *Service) restoreEgress(ctx context.Context, r store.Sandbox) {
	p, err := s.storedPolicy(ctx, r)
	if err == nil && p != nil {
		err = s.backend.SetEgress(ctx, r.ID, p)
	}
	if err != nil {
		s.log.Error("restore egress policy; its steered traffic stays refused", "sandbox", r.ID, "err", err)
	}
}

// UpdateSandboxNetwork implements PUT /sandboxes/{id}/network: the egress
// settings are replaced (omitted fields cleared; allowPublicTraffic,
// maskRequestHost and httpsPorts kept) and in force when it answers 204.
// 400 for a bad config or a missing secret, 404 for unknown or other teams'
// sandboxes, 409 while paused.
func (h httpAPI) UpdateSandboxNetwork(w http.ResponseWriter, r *http.Request, id api.SandboxID) {
	var b api.SandboxNetworkUpdateConfig
	if !h.ready(w) {
		return
	}
	if err := decodeBody(w, r, &b, true); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := h.s.updateNetwork(r.Context(), id, teamOf(r), b); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) updateNetwork(ctx context.Context, id, team string, b api.SandboxNetworkUpdateConfig) error {
	sb, err := s.acquire(id, team)
	if err != nil {
		return err
	}
	defer sb.op.Unlock()
	rec, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return err
	}
	merged := mergeNetwork(rec.Network, b)
	ns, err := parseNetwork(merged, b.AllowInternetAccess)
	if err == nil {
		err = s.checkSecrets(ctx, sb.team, ns.policy)
	}
	if err != nil {
		return err
	}
	if !s.running(sb) {
		return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("sandbox %s is paused: resume it to change its network", id)}
	}
	err = s.backend.SetEgress(ctx, id, ns.policy)
	if errors.Is(err, backend.ErrNotFound) {
		return sandboxNotFound(id)
	}
	if err != nil {
		return fmt.Errorf("apply network of %s: %w", id, err)
	}
	var sealed []byte
	if ns.password != "" && s.sealer != nil {
		sealed = s.sealer.Seal([]byte(ns.password), netSecretAD(id))
	}
	if err := s.store.SetNetwork(ctx, id, b.AllowInternetAccess, ns.stored, sealed); err != nil {
		return fmt.Errorf("record network of %s: %w", id, err)
	}
	s.dropKilledSecrets(ctx) // the old credentials leave the WAL too
	s.log.Info("sandbox network updated", "sandbox", id, "steered", ns.policy.NeedsProxy())
	return nil
}

// running reports whether sb is running (not paused).
func (s *Service) running(sb *sandbox) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return sb.running()
}

// mergeNetwork is the stored config with its egress part replaced by b's.
func mergeNetwork(stored json.RawMessage, b api.SandboxNetworkUpdateConfig) *api.SandboxNetworkConfig {
	var n api.SandboxNetworkConfig
	if len(stored) > 0 {
		_ = json.Unmarshal(stored, &n) // written by this package
	}
	n.AllowOut, n.DenyOut, n.Rules, n.EgressProxy = b.AllowOut, b.DenyOut, b.Rules, b.EgressProxy
	return &n
}

// SandboxSecret returns the value of secret name of live sandbox's team (the
// egress proxy filling in a rule). Errors wrap policy.ErrUnknownSecret.
func (s *Service) SandboxSecret(ctx context.Context, sandbox, name string) (string, error) {
	sb := s.lookup(sandbox)
	if sb == nil {
		return "", fmt.Errorf("sandbox %s is gone: %w", sandbox, policy.ErrUnknownSecret)
	}
	return s.SecretValue(ctx, sb.team, name)
}
