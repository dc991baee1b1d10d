package sdk

import (
	"context"
	"net/http"
	"time"

	"github.com/cubby-dev/cubby/sdk/internal/apiclient"
)

// TemplateInfo describes a built template (GET /templates, E2B's Template).
type TemplateInfo struct {
	TemplateID string
	// BuildID is the build of the template's current version.
	BuildID string
	// Aliases are the names it can be created by (its name first).
	Aliases []string
	// CPUCount, MemoryMB and DiskSizeMB are what sandboxes created from it get.
	CPUCount   int
	MemoryMB   int // MiB
	DiskSizeMB int // MiB
	Public     bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// BuildStatus is "ready", "building", "waiting" or "error".
	BuildStatus string
	EnvdVersion string
	// SizeBytes is the template's disk usage when the server reports it
	// (a Cubby extension), else 0.
	SizeBytes int64
}

// TemplateBuild is one template build and (part of) its log
// (GET /templates/{id}/builds/{buildID}/status).
type TemplateBuild struct {
	TemplateID string
	BuildID    string
	// Status is "ready", "building", "waiting" or "error".
	Status string
	// Logs are the log entries from TemplateBuildOptions.LogsOffset on, oldest first.
	Logs []LogEntry
}

// LogEntry is one log line of a sandbox or a template build.
type LogEntry struct {
	Timestamp time.Time
	// Level is "debug", "info", "warn" or "error".
	Level   string
	Message string
	// Fields are structured fields of the line, if any.
	Fields map[string]string
}

// TemplateBuildOptions select the part of a build log GetTemplateBuild returns.
type TemplateBuildOptions struct {
	ConnectionOptions
	// LogsOffset skips this many entries (a poller passes the count it has).
	LogsOffset int
	// Limit caps the entries returned; 0 means all that remain.
	Limit int
}

// ListTemplates returns the templates the server can create sandboxes from.
// Errors: *AuthenticationError, *ConnectionError, *APIError (e.g. 501 from a
// server that does not list templates).
func ListTemplates(ctx context.Context, opts *ConnectionOptions) ([]TemplateInfo, error) {
	var out []TemplateInfo
	err := withControlPlane(opts, func(cp *controlPlane) error {
		_, _, b, err := cp.call(ctx, "list templates", "", []int{http.StatusOK}, func(ctx context.Context) (*http.Response, error) {
			return cp.client.ListTemplates(ctx)
		})
		if err != nil {
			return err
		}
		var raw []apiclient.Template
		if err := decodeBody("list templates", b, &raw); err != nil {
			return err
		}
		for _, t := range raw {
			out = append(out, TemplateInfo{
				TemplateID: t.TemplateID, BuildID: t.BuildID, Aliases: t.Aliases, CPUCount: int(t.CpuCount),
				MemoryMB: int(t.MemoryMB), DiskSizeMB: int(t.DiskSizeMB), Public: t.Public, CreatedAt: t.CreatedAt,
				UpdatedAt: t.UpdatedAt, BuildStatus: string(t.BuildStatus), EnvdVersion: t.EnvdVersion, SizeBytes: deref(t.SizeBytes),
			})
		}
		return nil
	})
	return out, err
}

// GetTemplateBuild returns a template build's status and its log entries.
// Errors: *NotFoundError (ResourceTemplate) for an unknown template or build,
// *InvalidArgumentError, *AuthenticationError, *ConnectionError, *APIError.
func GetTemplateBuild(ctx context.Context, templateID, buildID string, opts *TemplateBuildOptions) (*TemplateBuild, error) {
	var o TemplateBuildOptions
	if opts != nil {
		o = *opts
	}
	p := apiclient.GetTemplateBuildStatusParams{}
	if o.LogsOffset > 0 {
		p.LogsOffset = new(int32(o.LogsOffset))
	}
	if o.Limit > 0 {
		p.Limit = new(int32(o.Limit))
	}
	var out *TemplateBuild
	err := withControlPlane(&o.ConnectionOptions, func(cp *controlPlane) error {
		_, _, b, err := cp.call(ctx, "get template build", "", []int{http.StatusOK}, func(ctx context.Context) (*http.Response, error) {
			return cp.client.GetTemplateBuildStatus(ctx, templateID, buildID, &p)
		})
		if nf, ok := err.(*NotFoundError); ok {
			nf.Resource, nf.ID = ResourceTemplate, templateID+" build "+buildID
		}
		if err != nil {
			return err
		}
		var raw apiclient.TemplateBuildInfo
		if err := decodeBody("get template build", b, &raw); err != nil {
			return err
		}
		out = &TemplateBuild{TemplateID: raw.TemplateID, BuildID: raw.BuildID, Status: string(raw.Status)}
		for _, e := range raw.LogEntries {
			out.Logs = append(out.Logs, LogEntry{Timestamp: e.Timestamp, Level: string(e.Level), Message: e.Message})
		}
		return nil
	})
	return out, err
}
