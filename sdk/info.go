package sdk

import (
	"maps"
	"time"

	"github.com/cubby-dev/cubby/sdk/internal/apiclient"
)

// SandboxState is the state of a sandbox: StateRunning or StatePaused.
type SandboxState string

// Sandbox states (docs/wire/e2b-api.md §2.2).
const (
	StateRunning SandboxState = "running"
	StatePaused  SandboxState = "paused"
)

// SandboxInfo describes a sandbox (SandboxDetail / ListedSandbox, docs/wire/e2b-api.md §2.2).
type SandboxInfo struct {
	SandboxID  string
	TemplateID string
	// Name is the template alias the sandbox was created from, if any.
	Name     string
	Metadata map[string]string
	// StartedAt is when the sandbox started; EndAt when it will be killed
	// (or paused) unless its timeout is changed.
	StartedAt time.Time
	EndAt     time.Time
	State     SandboxState
	CPUCount  int
	// MemoryMB and DiskSizeMB are in MiB.
	MemoryMB    int
	DiskSizeMB  int
	EnvdVersion string
	// AllowInternetAccess is set by GetInfo when the sandbox was created with
	// an explicit choice.
	AllowInternetAccess *bool
	// SandboxDomain is the domain the server returned for the sandbox ("" if none).
	SandboxDomain string
	// Lifecycle is set by GetInfo when the server reports it.
	Lifecycle *LifecycleInfo
	// PauseMode is what a paused sandbox's latest pause kept: "full" (memory
	// and filesystem) or "filesystem", set by GetInfo on servers that report
	// it; "" otherwise.
	PauseMode string
	// Network is the sandbox's network settings as GetInfo reports them (an
	// egress proxy's password is never returned); nil when it has none.
	Network *NetworkOptions
	// PauseMethod is how a Cubby server paused the sandbox: "freeze" (runc),
	// "checkpoint" (gVisor) or "filesystem"; "" on other servers and while running.
	PauseMethod string
}

// LifecycleInfo says what happens at a sandbox's deadline.
type LifecycleInfo struct {
	// OnTimeout is "kill" or "pause".
	OnTimeout string
	// AutoResume reports whether traffic to a paused sandbox resumes it.
	AutoResume bool
}

// SandboxMetrics is one resource sample of a sandbox (SandboxMetric, docs/wire/e2b-api.md §2.2).
type SandboxMetrics struct {
	Timestamp  time.Time
	CPUUsedPct float64 // percent
	CPUCount   int
	MemUsed    int64 // bytes
	MemTotal   int64 // bytes
	MemCache   int64 // bytes (page cache)
	DiskUsed   int64 // bytes
	DiskTotal  int64 // bytes
}

func infoFromDetail(d *apiclient.SandboxDetail) *SandboxInfo {
	info := &SandboxInfo{
		SandboxID: d.SandboxID, TemplateID: d.TemplateID, Name: deref(d.Alias),
		Metadata: maps.Clone(map[string]string(deref(d.Metadata))), StartedAt: d.StartedAt, EndAt: d.EndAt,
		State: SandboxState(d.State), CPUCount: int(d.CpuCount), MemoryMB: int(d.MemoryMB),
		DiskSizeMB: int(d.DiskSizeMB), EnvdVersion: d.EnvdVersion, AllowInternetAccess: d.AllowInternetAccess,
		SandboxDomain: deref(d.Domain), PauseMode: string(deref(d.PauseMode)),
		PauseMethod: string(deref(d.CubbyPauseMethod)),
	}
	if d.Lifecycle != nil {
		info.Lifecycle = &LifecycleInfo{OnTimeout: string(d.Lifecycle.OnTimeout), AutoResume: d.Lifecycle.AutoResume}
	}
	if d.Network != nil {
		info.Network = networkFromWire(d.Network)
	}
	if info.Metadata == nil {
		info.Metadata = map[string]string{}
	}
	return info
}

func infoFromListed(l *apiclient.ListedSandbox) SandboxInfo {
	info := SandboxInfo{
		SandboxID: l.SandboxID, TemplateID: l.TemplateID, Name: deref(l.Alias),
		Metadata: maps.Clone(map[string]string(deref(l.Metadata))), StartedAt: l.StartedAt, EndAt: l.EndAt,
		State: SandboxState(l.State), CPUCount: int(l.CpuCount), MemoryMB: int(l.MemoryMB),
		DiskSizeMB: int(l.DiskSizeMB), EnvdVersion: l.EnvdVersion,
	}
	if info.Metadata == nil {
		info.Metadata = map[string]string{}
	}
	return info
}
