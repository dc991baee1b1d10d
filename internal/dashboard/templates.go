package dashboard

import (
	"errors"
	"net/http"

	"github.com/cubby-dev/cubby/sdk"
)

type templatesData struct {
	Templates []sdk.TemplateInfo
	Error     string
}

type templateData struct {
	Template sdk.TemplateInfo
	Build    *sdk.TemplateBuild
	Error    string
}

// templatesPage lists the templates through GET /templates.
func (d *Dashboard) templatesPage(w http.ResponseWriter, r *http.Request, sess *session) {
	var data templatesData
	list, err := sdk.ListTemplates(r.Context(), new(d.conn(sess)))
	if err != nil {
		data.Error = errorText(err)
	}
	data.Templates = list
	d.page(w, sess, http.StatusOK, "templates", "Templates", "templates", data)
}

// templatePage shows one template (by ID or alias) and the log of its
// current build.
func (d *Dashboard) templatePage(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	conn := d.conn(sess)
	list, err := sdk.ListTemplates(r.Context(), &conn)
	if err != nil {
		d.errorPage(w, r, http.StatusBadGateway, errorText(err))
		return
	}
	var data templateData
	found := false
	for _, t := range list {
		if t.TemplateID == id || contains(t.Aliases, id) {
			data.Template, found = t, true
		}
	}
	if !found {
		d.errorPage(w, r, http.StatusNotFound, "There is no template "+id+".")
		return
	}
	build, err := sdk.GetTemplateBuild(r.Context(), data.Template.TemplateID, data.Template.BuildID,
		&sdk.TemplateBuildOptions{ConnectionOptions: conn})
	switch {
	case errors.Is(err, sdk.ErrNotFound):
		data.Error = "The server keeps no record of this build."
	case err != nil:
		data.Error = errorText(err)
	}
	data.Build = build
	d.page(w, sess, http.StatusOK, "template", "Template "+id, "templates", data)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
