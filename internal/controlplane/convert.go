package controlplane

import (
	"encoding/json"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/store"
)

// clientID is the deprecated constant E2B still returns and Python requires (docs/wire/e2b-api.md §2.2).
const clientID = "6532622b"

func (s *Service) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	d := s.cfg.Domain
	return &d
}

func optString(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

// sandboxView is the Sandbox body of create and connect (docs/wire/e2b-api.md §2.2).
func (s *Service) sandboxView(r store.Sandbox) api.Sandbox {
	return api.Sandbox{
		SandboxID: r.ID, TemplateID: r.TemplateID, Alias: optString(r.TemplateAlias),
		ClientID: clientID, EnvdVersion: agentapi.EnvdVersion,
		EnvdAccessToken: optString(r.AccessToken), TrafficAccessToken: optString(r.TrafficToken),
		Domain: s.domain(),
	}
}

// detailView is the SandboxDetail body of GET /sandboxes/{id}; pauseMode and
// cubbyPauseMethod come from the backend's pause mode, omitted when empty (running).
func (s *Service) detailView(r store.Sandbox, pauseMode backend.PauseMode) api.SandboxDetail {
	meta := api.SandboxMetadata(r.Metadata)
	life := api.SandboxLifecycle{OnTimeout: api.SandboxLifecycleOnTimeout(r.Lifecycle.OnTimeout), AutoResume: r.Lifecycle.AutoResume}
	if life.OnTimeout == "" {
		life.OnTimeout = api.Kill
	}
	d := api.SandboxDetail{
		SandboxID: r.ID, TemplateID: r.TemplateID, Alias: optString(r.TemplateAlias),
		ClientID: clientID, EnvdVersion: agentapi.EnvdVersion, EnvdAccessToken: optString(r.AccessToken),
		Domain: s.domain(), StartedAt: r.StartedAt.UTC(), EndAt: r.EndAt.UTC(),
		CpuCount: int32(r.CPUCount), MemoryMB: int32(r.MemoryMB), DiskSizeMB: int32(r.DiskSizeMB),
		State: api.SandboxState(r.State), Metadata: &meta, AllowInternetAccess: r.AllowInternetAccess,
		Network: networkView(r.Network), Lifecycle: &life, VolumeMounts: mountsView(r.VolumeMounts),
	}
	if r.State == store.StatePaused && pauseMode != "" {
		mode, method := pauseViews(pauseMode)
		d.PauseMode, d.CubbyPauseMethod = &mode, &method
	}
	return d
}

// pauseViews maps a backend pause mode to E2B's pauseMode (full: memory kept;
// filesystem: disk only) and Cubby's finer cubbyPauseMethod.
func pauseViews(m backend.PauseMode) (api.SandboxPauseMode, api.CubbyPauseMethod) {
	switch m {
	case backend.PauseMemory:
		return api.SandboxPauseModeFull, api.CubbyPauseMethodFreeze
	case backend.PauseCheckpoint:
		return api.SandboxPauseModeFull, api.CubbyPauseMethodCheckpoint
	default:
		return api.SandboxPauseModeFilesystem, api.CubbyPauseMethodFilesystem
	}
}

// networkView decodes the stored network config, dropping the egress proxy password.
func networkView(raw json.RawMessage) *api.SandboxNetworkConfig {
	if len(raw) == 0 {
		return nil
	}
	var n api.SandboxNetworkConfig
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil
	}
	if n.EgressProxy != nil {
		n.EgressProxy.Password = nil
	}
	return &n
}

// listedView is one element of the list endpoints.
func listedView(r store.Sandbox) api.ListedSandbox {
	meta := api.SandboxMetadata(r.Metadata)
	return api.ListedSandbox{
		SandboxID: r.ID, TemplateID: r.TemplateID, Alias: optString(r.TemplateAlias), ClientID: clientID,
		StartedAt: r.StartedAt.UTC(), EndAt: r.EndAt.UTC(),
		CpuCount: int32(r.CPUCount), MemoryMB: int32(r.MemoryMB), DiskSizeMB: int32(r.DiskSizeMB),
		State: api.SandboxState(r.State), EnvdVersion: agentapi.EnvdVersion, Metadata: &meta,
		VolumeMounts: mountsView(r.VolumeMounts),
	}
}

func listedViews(recs []store.Sandbox) []api.ListedSandbox {
	out := make([]api.ListedSandbox, 0, len(recs))
	for _, r := range recs {
		out = append(out, listedView(r))
	}
	return out
}
