package controlplane

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/api/templateapi"
	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/template"
)

// GetTemplateAlias implements GET /templates/aliases/{alias} (Template.exists).
func (t templateAPI) GetTemplateAlias(w http.ResponseWriter, r *http.Request, alias string) {
	if !t.ready(w) {
		return
	}
	info, err := t.s().tstore.Get(alias)
	if err != nil {
		t.fail(w, r, err)
		return
	}
	if !info.VisibleTo(teamOf(r)) { // E2B: 403 = the name exists but is not yours
		writeError(w, http.StatusForbidden, fmt.Sprintf("template '%s' belongs to another team", alias))
		return
	}
	writeJSON(w, http.StatusOK, templateapi.TemplateAliasResponse{TemplateID: info.ID, Public: info.Public})
}

// ListTemplatesV2 implements GET /v2/templates (every template on one page).
func (t templateAPI) ListTemplatesV2(w http.ResponseWriter, r *http.Request, _ templateapi.ListTemplatesV2Params) {
	t.list(w, r)
}

func (t templateAPI) list(w http.ResponseWriter, r *http.Request) {
	if !t.ready(w) {
		return
	}
	infos, err := t.s().tstore.List()
	if err != nil {
		t.fail(w, r, err)
		return
	}
	out := make([]api.Template, 0, len(infos))
	for _, info := range infos {
		if !info.VisibleTo(teamOf(r)) {
			continue
		}
		tpl, err := t.view(r, info)
		if err != nil {
			t.fail(w, r, err)
			return
		}
		out = append(out, tpl)
	}
	writeJSON(w, http.StatusOK, out)
}

// view renders a template for the list endpoints (GET /templates and GET
// /v2/templates answer the same shape).
func (t templateAPI) view(r *http.Request, info template.Info) (api.Template, error) {
	spawns, last, err := t.s().store.TemplateUsage(r.Context(), info.ID)
	if err != nil {
		return api.Template{}, err
	}
	recs, err := t.s().store.ListTemplateBuilds(r.Context(), info.ID)
	if err != nil {
		return api.Template{}, err
	}
	cfg := t.s().cfg
	size := info.SizeBytes
	return api.Template{
		TemplateID: info.ID, BuildID: info.BuildID, BuildStatus: api.TemplateBuildStatusReady, SizeBytes: &size,
		Names: []string{info.Name}, Aliases: info.Aliases, Public: info.Public,
		CpuCount: int32(orDefault(info.CPUCount, cfg.DefaultCPU)), MemoryMB: int32(orDefault(info.MemoryMB, cfg.DefaultMemoryMB)),
		DiskSizeMB: int32(cfg.DefaultDiskMB), EnvdVersion: agentapi.EnvdVersion,
		CreatedAt: created(info, recs), UpdatedAt: info.BuiltAt, LastSpawnedAt: timePtr(last),
		SpawnCount: spawns, BuildCount: int32(max(len(recs), 1)),
	}, nil
}

// created is when a template was first built: its oldest recorded build,
// else its current build.
func created(info template.Info, recs []store.TemplateBuild) time.Time {
	first := info.BuiltAt
	for _, b := range recs {
		if b.CreatedAt.Before(first) {
			first = b.CreatedAt
		}
	}
	return first
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// GetTemplate implements GET /templates/{templateID}: the template with its
// builds (those requested through this server, else its tagged builds).
func (t templateAPI) GetTemplate(w http.ResponseWriter, r *http.Request, templateID string) {
	if !t.ready(w) {
		return
	}
	info, err := t.visible(r, templateID)
	if err != nil {
		t.fail(w, r, err)
		return
	}
	tpl, err := t.view(r, info)
	if err != nil {
		t.fail(w, r, err)
		return
	}
	out := templateapi.TemplateWithBuilds{TemplateID: info.ID, Public: info.Public, Aliases: info.Aliases, Names: tpl.Names,
		CreatedAt: tpl.CreatedAt, UpdatedAt: tpl.UpdatedAt, LastSpawnedAt: tpl.LastSpawnedAt, SpawnCount: tpl.SpawnCount}
	recs, err := t.s().store.ListTemplateBuilds(r.Context(), info.ID)
	if err != nil {
		t.fail(w, r, err)
		return
	}
	for _, b := range recs {
		tb := templateapi.TemplateBuild{BuildID: b.ID, Status: templateapi.TemplateBuildStatus(b.Status), CreatedAt: b.CreatedAt,
			UpdatedAt: b.UpdatedAt, CpuCount: int32(b.CPUCount), MemoryMB: int32(b.MemoryMB), FinishedAt: timePtr(b.FinishedAt)}
		out.Builds = append(out.Builds, tb)
	}
	if len(recs) == 0 {
		out.Builds = append(out.Builds, templateapi.TemplateBuild{BuildID: info.BuildID, Status: templateapi.TemplateBuildStatusReady, CreatedAt: info.BuiltAt,
			UpdatedAt: info.BuiltAt, FinishedAt: timePtr(info.BuiltAt), CpuCount: tpl.CpuCount, MemoryMB: tpl.MemoryMB})
	}
	writeJSON(w, http.StatusOK, out)
}

// DeleteTemplate implements DELETE /templates/{templateID}: a snapshot of the
// caller's team by that ID or name is deleted (how the SDKs delete one, see
// docs/snapshots.md); else the template, unless snapshots were taken of it
// (409: sandboxes start from them with its settings): its tags go at once,
// its trees stay while sandboxes use them (pruned in the background).
func (t templateAPI) DeleteTemplate(w http.ResponseWriter, r *http.Request, templateID string) {
	if !t.h.ready(w) {
		return
	}
	if sn, err := t.s().findSnapshot(r.Context(), teamOf(r), templateID); err == nil && !sn.Internal {
		if err := t.s().deleteSnapshot(r.Context(), teamOf(r), templateID); err != nil {
			t.h.fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if t.s().tstore == nil { // no template service: only snapshots, as before
		writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' not found", templateID))
		return
	}
	if !t.ready(w) {
		return
	}
	info, err := t.owned(r, templateID)
	if err == nil {
		if def, derr := t.s().tstore.Get(t.s().cfg.DefaultTemplate); derr == nil && def.ID == info.ID {
			writeError(w, http.StatusConflict, fmt.Sprintf("template '%s' is the server's default template and cannot be deleted", templateID))
			return
		}
		if n, serr := t.s().store.TemplateSnapshots(r.Context(), info.ID); serr != nil || n > 0 {
			if serr == nil {
				serr = &httpError{status: http.StatusConflict, msg: fmt.Sprintf(
					"template '%s' has %d snapshot(s); delete them first (DELETE /templates/{snapshotID})", templateID, n)}
			}
			t.h.fail(w, r, serr)
			return
		}
		err = t.s().tstore.Delete(r.Context(), info.ID)
	}
	if err != nil {
		t.fail(w, r, err)
		return
	}
	if t.s().pruneTemplates != nil {
		t.s().pruneTemplates()
	}
	w.WriteHeader(http.StatusNoContent)
}

// UpdateTemplate implements PATCH /templates/{templateID} (deprecated v1).
func (t templateAPI) UpdateTemplate(w http.ResponseWriter, r *http.Request, templateID string) {
	if _, ok := t.update(w, r, templateID); ok {
		w.WriteHeader(http.StatusOK)
	}
}

// UpdateTemplateV2 implements PATCH /v2/templates/{templateID}.
func (t templateAPI) UpdateTemplateV2(w http.ResponseWriter, r *http.Request, templateID string) {
	if info, ok := t.update(w, r, templateID); ok {
		writeJSON(w, http.StatusOK, templateapi.TemplateUpdateResponse{Names: []string{info.Name}})
	}
}

func (t templateAPI) update(w http.ResponseWriter, r *http.Request, templateID string) (template.Info, bool) {
	var b templateapi.TemplateUpdateRequest
	if !t.decode(w, r, &b) {
		return template.Info{}, false
	}
	info, err := t.owned(r, templateID)
	if err == nil && b.Public != nil {
		info, err = t.s().tstore.SetPublic(r.Context(), info.ID, *b.Public)
	}
	if err != nil {
		t.fail(w, r, err)
		return template.Info{}, false
	}
	return info, true
}

// AssignTemplateTags implements POST /templates/tags.
func (t templateAPI) AssignTemplateTags(w http.ResponseWriter, r *http.Request) {
	var b templateapi.AssignTemplateTagsRequest
	if !t.decode(w, r, &b) {
		return
	}
	name, _, _ := strings.Cut(b.Target, ":")
	_, err := t.owned(r, name)
	var buildID string
	if err == nil {
		buildID, err = t.s().tstore.AssignTags(r.Context(), b.Target, b.Tags)
	}
	if err != nil {
		t.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, templateapi.AssignedTemplateTags{BuildID: buildID, Tags: b.Tags})
}

// DeleteTemplateTags implements DELETE /templates/tags.
func (t templateAPI) DeleteTemplateTags(w http.ResponseWriter, r *http.Request) {
	var b templateapi.DeleteTemplateTagsRequest
	if !t.decode(w, r, &b) {
		return
	}
	_, err := t.owned(r, b.Name)
	if err == nil {
		err = t.s().tstore.RemoveTags(r.Context(), b.Name, b.Tags)
	}
	if err != nil {
		t.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listTags serves GET /templates/{templateID}/tags. It is not in
// api/templates.yaml: http.ServeMux cannot rank that pattern against
// /templates/aliases/{alias} (each matches a path the other does not), so
// templateTagsRoute dispatches it before the mux.
func (t templateAPI) listTags(w http.ResponseWriter, r *http.Request, templateID string) {
	if !t.ready(w) {
		return
	}
	info, err := t.visible(r, templateID)
	var bs []template.Info
	if err == nil {
		bs, err = t.s().tstore.Builds(info.ID)
	}
	if err != nil {
		t.fail(w, r, err)
		return
	}
	out := []templateapi.TemplateTag{}
	for _, b := range bs {
		if b.Tag != "" {
			out = append(out, templateapi.TemplateTag{Tag: b.Tag, BuildID: b.BuildID, CreatedAt: b.BuiltAt})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// templateTagsRoute sends GET /templates/{templateID}/tags to listTags.
func (t templateAPI) templateTagsRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
		if r.Method == http.MethodGet && len(parts) == 3 && parts[0] == "templates" && parts[1] != "aliases" && parts[2] == "tags" {
			id, err := url.PathUnescape(parts[1])
			if err != nil {
				writeError(w, http.StatusBadRequest, "malformed template ID")
				return
			}
			t.listTags(w, r, id)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// uploadTTL is how long an upload URL handed out by GetTemplateFiles works.
const uploadTTL = time.Hour

// GetTemplateFiles implements GET /templates/{templateID}/files/{hash}: 201
// with present, or an upload URL on this server signed for an hour.
func (t templateAPI) GetTemplateFiles(w http.ResponseWriter, r *http.Request, templateID, hash string) {
	id, ok := t.ownedOr404(w, r, templateID)
	if !ok {
		return
	}
	if !hashRe.MatchString(hash) {
		writeError(w, http.StatusBadRequest, "files hash must be 64 lowercase hex digits")
		return
	}
	if t.s().builds.HasFiles(id, hash) {
		writeJSON(w, http.StatusCreated, templateapi.TemplateBuildFileUpload{Present: true})
		return
	}
	expires := time.Now().Add(uploadTTL).Unix()
	u := url.URL{Scheme: requestScheme(r), Host: r.Host, Path: "/templates/" + id + "/files/" + hash,
		RawQuery: url.Values{"expires": {strconv.FormatInt(expires, 10)}, "signature": {t.s().uploadSignature(id, hash, expires)}}.Encode()}
	us := u.String()
	writeJSON(w, http.StatusCreated, templateapi.TemplateBuildFileUpload{Present: false, Url: &us})
}

// requestScheme is the scheme the client used (a TLS front proxy sets
// X-Forwarded-Proto).
func requestScheme(r *http.Request) string {
	if p := r.Header.Get("X-Forwarded-Proto"); p == "https" || p == "http" {
		return p
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// uploadSignature is the HMAC-SHA256, under the server's upload key, of the
// template, the files hash and the expiry.
func (s *Service) uploadSignature(id, hash string, expires int64) string {
	m := hmac.New(sha256.New, s.uploadKey)
	fmt.Fprintf(m, "%s\n%s\n%d", id, hash, expires)
	return hex.EncodeToString(m.Sum(nil))
}

// UploadTemplateFiles implements the PUT of an upload URL: the signature
// (not an API key) authorises it; the body needs a Content-Length, as S3's
// presigned URLs do.
func (t templateAPI) UploadTemplateFiles(w http.ResponseWriter, r *http.Request, templateID, hash string, p templateapi.UploadTemplateFilesParams) {
	if !t.ready(w) {
		return
	}
	want := t.s().uploadSignature(templateID, hash, p.Expires)
	if !hmac.Equal([]byte(want), []byte(p.Signature)) || time.Now().Unix() > p.Expires {
		writeError(w, http.StatusForbidden, "upload URL signature invalid or expired")
		return
	}
	if r.ContentLength < 0 {
		writeError(w, http.StatusLengthRequired, "uploads need a Content-Length")
		return
	}
	if err := t.s().builds.Upload(r.Context(), templateID, hash, r.Body); err != nil {
		t.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// hashRe matches a COPY step's files hash (sha256, lowercase hex).
var hashRe = regexp.MustCompile(`^[0-9a-f]{64}$`)
