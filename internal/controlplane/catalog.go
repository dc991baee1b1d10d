package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/api"
)

// TemplateCatalog lists built templates and reads their build logs for
// GET /templates and GET /templates/{id}/builds/{buildID}/status. A
// Deps.Templates resolver that also implements it serves those routes; without
// one they answer 501.
type TemplateCatalog interface {
	// Templates returns every built template, sorted by name.
	Templates(ctx context.Context) ([]TemplateListing, error)
	// BuildLog returns the log of one build of a template (ID or alias),
	// oldest line first; nil when the build kept none. Errors wrap
	// ErrTemplateNotFound for an unknown template or build.
	BuildLog(ctx context.Context, idOrAlias, buildID string) ([]BuildLogLine, error)
}

// TemplateListing is one built template.
type TemplateListing struct {
	ID        string
	BuildID   string   // the build of its current tree
	Aliases   []string // its name first
	BuiltAt   time.Time
	SizeBytes int64 // disk usage of the tree
}

// BuildLogLine is one line of a template build's log.
type BuildLogLine struct {
	Time    time.Time
	Level   string // debug, info, warn or error
	Message string
}

// catalog returns the template catalog, or a 501 error.
func (h httpAPI) catalog() (TemplateCatalog, error) {
	if c, ok := h.s.templates.(TemplateCatalog); ok {
		return c, nil
	}
	return nil, &httpError{status: http.StatusNotImplemented, msg: "this server does not list templates"}
}

// ListTemplates implements GET /templates: every built template in E2B's
// Template shape. Built templates are shared by every API key (public) and
// always ready; sizes are the server's defaults for new sandboxes.
//
// A server with a template service (Deps.TemplateStore) lists the templates
// the caller's team may use instead, with their use counts (templateAPI.list).
func (h httpAPI) ListTemplates(w http.ResponseWriter, r *http.Request) {
	if h.s.tstore != nil {
		templateAPI{h}.list(w, r)
		return
	}
	c, err := h.catalog()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	list, err := c.Templates(r.Context())
	if err != nil {
		h.fail(w, r, fmt.Errorf("list templates: %w", err))
		return
	}
	out := make([]api.Template, 0, len(list))
	for _, t := range list {
		size := t.SizeBytes
		out = append(out, api.Template{
			TemplateID: t.ID, BuildID: t.BuildID, Aliases: nonNil(t.Aliases), Names: nonNil(t.Aliases),
			CpuCount: int32(h.s.cfg.DefaultCPU), MemoryMB: int32(h.s.cfg.DefaultMemoryMB),
			DiskSizeMB: int32(h.s.cfg.DefaultDiskMB), Public: true, CreatedAt: t.BuiltAt.UTC(),
			UpdatedAt: t.BuiltAt.UTC(), EnvdVersion: agentapi.EnvdVersion,
			BuildStatus: api.TemplateBuildStatusReady, SizeBytes: &size, BuildCount: 1,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// GetTemplateBuildStatus implements GET /templates/{id}/builds/{buildID}/status
// ?logsOffset&limit: the build (built templates are "ready") and its log
// entries from logsOffset on, at most limit of them (0: all), at level or
// above.
//
// Builds requested through the template build API (a server with a template
// service) are answered from their record instead, live while they run
// (templateAPI.buildStatus); the catalog answers for the others (built by
// cubby template build or at first start) of templates the caller may see.
func (h httpAPI) GetTemplateBuildStatus(w http.ResponseWriter, r *http.Request, templateID, buildID string, p api.GetTemplateBuildStatusParams) {
	if h.s.tstore != nil && h.s.builds != nil && (templateAPI{h}).buildStatus(w, r, templateID, buildID, p) {
		return
	}
	c, err := h.catalog()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	offset, limit := 0, 0
	if p.LogsOffset != nil {
		offset = int(*p.LogsOffset)
	}
	if p.Limit != nil {
		limit = int(*p.Limit)
	}
	if offset < 0 || limit < 0 {
		h.fail(w, r, badRequest("logsOffset and limit must not be negative"))
		return
	}
	lines, err := c.BuildLog(r.Context(), templateID, buildID)
	if errors.Is(err, ErrTemplateNotFound) {
		h.fail(w, r, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("template '%s' build '%s' not found", templateID, buildID)})
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if p.Level != nil {
		var kept []BuildLogLine
		for _, l := range lines {
			if levelRank[l.Level] >= levelRank[string(*p.Level)] {
				kept = append(kept, l)
			}
		}
		lines = kept
	}
	lines = lines[min(offset, len(lines)):]
	if limit > 0 && len(lines) > limit {
		lines = lines[:limit]
	}
	out := api.TemplateBuildInfo{TemplateID: templateID, BuildID: buildID, Status: api.TemplateBuildStatusReady,
		Logs: make([]string, 0, len(lines)), LogEntries: make([]api.TemplateBuildLogEntry, 0, len(lines))}
	for _, l := range lines {
		out.Logs = append(out.Logs, l.Message)
		out.LogEntries = append(out.LogEntries, api.TemplateBuildLogEntry{
			Timestamp: l.Time.UTC(), Level: api.TemplateBuildLogEntryLevel(l.Level), Message: l.Message})
	}
	writeJSON(w, http.StatusOK, out)
}

// levelRank orders log levels (debug < info < warn < error).
var levelRank = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
