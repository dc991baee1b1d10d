package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/api/templateapi"
	"github.com/cubby-dev/cubby/internal/builds"
	"github.com/cubby-dev/cubby/internal/image"
	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/template"
)

// TemplateStore is what the template API reads and changes of the built
// templates (template.Manager).
type TemplateStore interface {
	Get(ref string) (template.Info, error)
	List() ([]template.Info, error)
	Builds(idOrName string) ([]template.Info, error)
	AssignTags(ctx context.Context, target string, tags []string) (string, error)
	RemoveTags(ctx context.Context, name string, tags []string) error
	Delete(ctx context.Context, idOrName string) error
	SetPublic(ctx context.Context, idOrName string, public bool) (template.Info, error)
}

// TemplateBuilds runs builds (builds.Service).
type TemplateBuilds interface {
	Request(ctx context.Context, p builds.RequestParams) (store.TemplateBuild, error)
	Build(ctx context.Context, team, templateID, buildID string) (store.TemplateBuild, error)
	Start(ctx context.Context, team, templateID, buildID string, spec template.Spec) error
	Status(ctx context.Context, team, templateID, buildID string, offset, limit int, level string) (builds.Status, error)
	Logs(ctx context.Context, team, templateID, buildID string, cursor time.Time, limit int, backward bool, level string) ([]template.Entry, error)
	HasFiles(templateID, hash string) bool
	Upload(ctx context.Context, templateID, hash string, body io.Reader) error
}

// templateAPI implements the template build API (templateapi.ServerInterface).
type templateAPI struct{ h httpAPI }

var _ templateapi.ServerInterface = templateAPI{}

func (t templateAPI) s() *Service { return t.h.s }

// ready answers 501 when the server has no template service (the
// kubernetes backend: its templates are the images it was given).
func (t templateAPI) ready(w http.ResponseWriter) bool {
	if t.s().tstore == nil || t.s().builds == nil {
		writeError(w, http.StatusNotImplemented, "this server does not build or manage templates: templates from code "+
			"and the template API need the single-host backend (docs/kubernetes.md lists the features per backend)")
		return false
	}
	return true
}

// fail answers err with the template API's statuses.
func (t templateAPI) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, template.ErrNotFound), errors.Is(err, builds.ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, builds.ErrInvalid), errors.Is(err, template.ErrInvalidSpec):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, builds.ErrStarted), errors.Is(err, builds.ErrNameInUse), errors.Is(err, template.ErrAliasTaken),
		errors.Is(err, template.ErrReadOnly):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, builds.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, err.Error())
	case errors.Is(err, builds.ErrShutdown):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		t.h.fail(w, r, err)
	}
}

// decode answers 501 without a template service and 400 for a malformed
// body; ok is false when it answered.
func (t templateAPI) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if !t.ready(w) {
		return false
	}
	if err := decodeBody(w, r, v, true); err != nil {
		t.h.fail(w, r, err)
		return false
	}
	return true
}

// ownedOr404 is ownedID answering the failure itself (503 without a
// template service); ok is false when it answered.
func (t templateAPI) ownedOr404(w http.ResponseWriter, r *http.Request, ref string) (string, bool) {
	if !t.ready(w) {
		return "", false
	}
	id, err := t.ownedID(r, ref)
	if err != nil {
		t.fail(w, r, err)
		return "", false
	}
	return id, true
}

// errNoTemplate answers a template the caller may not see like an absent one.
func errNoTemplate(ref string) error {
	return fmt.Errorf("template %q: %w", ref, template.ErrNotFound)
}

// ownedID resolves a template ID, name or alias to the ID of a template the
// caller's team owns: built, or with a build the team requested. Others'
// templates are answered like absent ones.
func (t templateAPI) ownedID(r *http.Request, ref string) (string, error) {
	team := teamOf(r)
	info, err := t.s().tstore.Get(ref)
	if err == nil {
		if info.Team != team {
			return "", errNoTemplate(ref)
		}
		return info.ID, nil
	}
	if !errors.Is(err, template.ErrNotFound) {
		return "", err
	}
	id := ref
	if !templateIDRe.MatchString(ref) {
		if !template.ValidName(ref) {
			return "", errNoTemplate(ref)
		}
		id = template.IDFor(ref)
	}
	owner, ok, err := t.s().store.TemplateBuildTeam(r.Context(), id)
	if err != nil {
		return "", err
	}
	if !ok || owner != team {
		return "", errNoTemplate(ref)
	}
	return id, nil
}

// visible returns the template ref names when the caller's team may use it.
func (t templateAPI) visible(r *http.Request, ref string) (template.Info, error) {
	info, err := t.s().tstore.Get(ref)
	if err == nil && !info.VisibleTo(teamOf(r)) {
		return template.Info{}, errNoTemplate(ref)
	}
	return info, err
}

// owned returns the template ref names when the caller's team owns it;
// built-ins (no team) are refused with 403.
func (t templateAPI) owned(r *http.Request, ref string) (template.Info, error) {
	info, err := t.s().tstore.Get(ref)
	switch {
	case err != nil:
		return template.Info{}, err
	case info.Team == "":
		return template.Info{}, &httpError{status: http.StatusForbidden, msg: fmt.Sprintf("template '%s' is managed by the server operator", ref)}
	case info.Team != teamOf(r):
		return template.Info{}, errNoTemplate(ref)
	}
	return info, nil
}

// templateIDRe matches template IDs (template.IDFor).
var templateIDRe = regexp.MustCompile(`^[a-z2-7]{20}$`)

// CreateTemplateV3 implements POST /v3/templates.
func (t templateAPI) CreateTemplateV3(w http.ResponseWriter, r *http.Request) {
	var b templateapi.TemplateBuildRequestV3
	if !t.decode(w, r, &b) {
		return
	}
	name := deref(b.Name)
	if name == "" {
		name = deref(b.Alias)
	}
	if name == "" {
		t.fail(w, r, fmt.Errorf("%w: name is required", builds.ErrInvalid))
		return
	}
	rec, err := t.s().builds.Request(r.Context(), builds.RequestParams{Team: teamOf(r), Name: name, Tags: derefSlice(b.Tags),
		CPUCount: int(deref(b.CpuCount)), MemoryMB: int(deref(b.MemoryMB))})
	if err != nil {
		t.fail(w, r, err)
		return
	}
	public := false
	if info, err := t.s().tstore.Get(rec.TemplateID); err == nil {
		public = info.Public
	}
	writeJSON(w, http.StatusAccepted, templateapi.TemplateRequestResponseV3{
		TemplateID: rec.TemplateID, BuildID: rec.ID, Public: public,
		Names: []string{rec.Name}, Aliases: []string{rec.Name}, Tags: rec.Tags,
	})
}

// StartTemplateBuildV2 implements POST /v2/templates/{templateID}/builds/{buildID}.
func (t templateAPI) StartTemplateBuildV2(w http.ResponseWriter, r *http.Request, templateID, buildID string) {
	var b templateapi.TemplateBuildStartV2
	if !t.decode(w, r, &b) {
		return
	}
	id, err := t.ownedID(r, templateID)
	if err != nil {
		t.fail(w, r, err)
		return
	}
	spec, err := specFromBody(b)
	if err == nil {
		err = t.s().builds.Start(r.Context(), teamOf(r), id, buildID, spec)
	}
	if err != nil {
		t.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusAccepted)
}

// specFromBody converts the E2B build body into a template.Spec.
func specFromBody(b templateapi.TemplateBuildStartV2) (template.Spec, error) {
	spec := template.Spec{From: template.Source{Image: deref(b.FromImage), Template: deref(b.FromTemplate)},
		StartCmd: deref(b.StartCmd), ReadyCmd: deref(b.ReadyCmd), Force: deref(b.Force)}
	if spec.From.Image == "" && spec.From.Template == "" {
		return template.Spec{}, fmt.Errorf("%w: exactly one of fromImage and fromTemplate is required", builds.ErrInvalid)
	}
	if reg := b.FromImageRegistry; reg != nil {
		creds, err := registryCredentials(*reg)
		if err != nil {
			return template.Spec{}, err
		}
		spec.From.Registry = creds
	}
	for _, st := range derefSlice(b.Steps) {
		spec.Steps = append(spec.Steps, template.Step{Type: st.Type, Args: derefSlice(st.Args), FilesHash: deref(st.FilesHash), Force: deref(st.Force)})
	}
	return spec, nil
}

// registryCredentials maps fromImageRegistry: "registry" is a username and
// password; "gcp" is Google's JSON key login (user "_json_key"); "aws" needs
// an ECR token exchange this server does not do.
func registryCredentials(reg templateapi.FromImageRegistry) (*image.Credentials, error) {
	switch reg.Type {
	case "registry":
		if deref(reg.Username) == "" || deref(reg.Password) == "" {
			return nil, fmt.Errorf("%w: fromImageRegistry needs username and password", builds.ErrInvalid)
		}
		return &image.Credentials{Username: deref(reg.Username), Password: deref(reg.Password)}, nil
	case "gcp":
		if deref(reg.ServiceAccountJson) == "" {
			return nil, fmt.Errorf("%w: fromImageRegistry type gcp needs serviceAccountJson", builds.ErrInvalid)
		}
		return &image.Credentials{Username: "_json_key", Password: deref(reg.ServiceAccountJson)}, nil
	}
	return nil, fmt.Errorf("%w: fromImageRegistry type %q is not supported by this server (use type \"registry\" with a token as password)", builds.ErrInvalid, reg.Type)
}

// buildStatus answers GET /templates/{templateID}/builds/{buildID}/status
// for builds requested through this API by the caller's team: the build's
// record and a page of its log (at most 100 entries; live while it runs).
// It answers 404 for templates of other teams too; handled is false for
// builds this API has no record of of templates the operator built or the
// caller's team owns, whose logs the catalog has (httpAPI.GetTemplateBuildStatus).
func (t templateAPI) buildStatus(w http.ResponseWriter, r *http.Request, templateID, buildID string, p api.GetTemplateBuildStatusParams) (handled bool) {
	id, err := t.ownedID(r, templateID)
	if err == nil {
		limit := 100
		if p.Limit != nil && *p.Limit > 0 && *p.Limit < 100 {
			limit = int(*p.Limit)
		}
		st, err := t.s().builds.Status(r.Context(), teamOf(r), id, buildID, int(deref(p.LogsOffset)), limit, string(deref(p.Level)))
		if err == nil {
			writeJSON(w, http.StatusOK, buildInfo(id, buildID, st))
			return true
		}
		if !errors.Is(err, builds.ErrNotFound) {
			t.fail(w, r, err)
			return true
		}
	} else if !errors.Is(err, template.ErrNotFound) {
		t.fail(w, r, err)
		return true
	}
	info, err := t.s().tstore.Get(templateID)
	if err == nil && (info.Team == "" || info.Team == teamOf(r)) {
		return false
	}
	if err != nil && !errors.Is(err, template.ErrNotFound) {
		t.fail(w, r, err)
		return true
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' build '%s' not found", templateID, buildID))
	return true
}

// buildInfo renders a recorded build's status.
func buildInfo(templateID, buildID string, st builds.Status) api.TemplateBuildInfo {
	out := api.TemplateBuildInfo{TemplateID: templateID, BuildID: buildID, Status: api.TemplateBuildStatus(st.Build.Status),
		Logs: make([]string, 0, len(st.Entries)), LogEntries: statusEntries(st.Entries)}
	for _, e := range st.Entries {
		out.Logs = append(out.Logs, e.Message)
	}
	if st.Build.Status == store.BuildError {
		entries := statusEntries(st.ReasonEntries)
		out.Reason = &api.TemplateBuildReason{Message: st.Build.Reason, LogEntries: &entries}
		if st.Build.ReasonStep != "" {
			out.Reason.Step = &st.Build.ReasonStep
		}
	}
	return out
}

func statusEntries(in []template.Entry) []api.TemplateBuildLogEntry {
	out := make([]api.TemplateBuildLogEntry, 0, len(in))
	for _, e := range in {
		le := api.TemplateBuildLogEntry{Timestamp: e.Time.UTC(), Level: api.TemplateBuildLogEntryLevel(e.Level), Message: e.Message}
		if e.Step != "" {
			step := e.Step
			le.Step = &step
		}
		out = append(out, le)
	}
	return out
}

// GetTemplateBuildLogs implements GET /templates/{templateID}/builds/{buildID}/logs.
func (t templateAPI) GetTemplateBuildLogs(w http.ResponseWriter, r *http.Request, templateID, buildID string, p templateapi.GetTemplateBuildLogsParams) {
	id, ok := t.ownedOr404(w, r, templateID)
	if !ok {
		return
	}
	var cursor time.Time
	if p.Cursor != nil {
		cursor = time.UnixMilli(*p.Cursor)
	}
	limit := 100
	if p.Limit != nil && *p.Limit > 0 {
		limit = min(int(*p.Limit), 10000)
	}
	backward := p.Direction != nil && *p.Direction == templateapi.Backward
	entries, err := t.s().builds.Logs(r.Context(), teamOf(r), id, buildID, cursor, limit, backward, string(deref(p.Level)))
	if err != nil {
		t.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, templateapi.TemplateBuildLogsResponse{Logs: logEntries(entries)})
}

func logEntries(in []template.Entry) []templateapi.BuildLogEntry {
	out := make([]templateapi.BuildLogEntry, 0, len(in))
	for _, e := range in {
		le := templateapi.BuildLogEntry{Timestamp: e.Time, Level: templateapi.LogLevel(e.Level), Message: e.Message}
		if e.Step != "" {
			step := e.Step
			le.Step = &step
		}
		out = append(out, le)
	}
	return out
}

func derefSlice[T any](p *[]T) []T {
	if p == nil {
		return nil
	}
	return *p
}

// isUploadPath reports whether path is a template files upload target
// (/templates/{id}/files/{hash}), which the URL's signature authorises.
func isUploadPath(path string) bool {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	return len(parts) == 4 && parts[0] == "templates" && parts[2] == "files"
}
