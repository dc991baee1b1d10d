package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// maxTableRows caps the sandboxes table.
const maxTableRows = 1000

// maxExtendMinutes caps "extend timeout" (24 h, the server's maximum).
const maxExtendMinutes = 24 * 60

type sandboxesData struct {
	State     string // running, paused or "" (both)
	Template  string
	Metadata  string // "k=v, k2=v2"
	Templates []string
	Rows      []sdk.SandboxInfo
	Truncated bool
	Error     string
	Back      string
}

// sandboxesPage lists the session's sandboxes, filtered by state, template
// and metadata (query parameters state, template, metadata "k=v, k=v").
func (d *Dashboard) sandboxesPage(w http.ResponseWriter, r *http.Request, sess *session) {
	q := r.URL.Query()
	data := sandboxesData{State: q.Get("state"), Template: strings.TrimSpace(q.Get("template")),
		Metadata: strings.TrimSpace(q.Get("metadata")), Back: r.URL.RequestURI()}
	conn := d.conn(sess)
	opts := &sdk.ListOptions{ConnectionOptions: conn, Template: data.Template,
		State: []sdk.SandboxState{sdk.StateRunning, sdk.StatePaused}}
	switch data.State {
	case "running", "paused":
		opts.State = []sdk.SandboxState{sdk.SandboxState(data.State)}
	default:
		data.State = ""
	}
	md, err := parseMetadata(data.Metadata)
	if err != nil {
		data.Error = err.Error()
	}
	opts.Metadata = md
	if data.Error == "" {
		data.Rows, data.Truncated, err = listAll(r.Context(), opts)
		if err != nil {
			data.Error = errorText(err)
		}
	}
	if tpls, err := sdk.ListTemplates(r.Context(), &conn); err == nil {
		for _, t := range tpls {
			data.Templates = append(data.Templates, t.Aliases...)
		}
	}
	d.page(w, sess, http.StatusOK, "sandboxes", "Sandboxes", "sandboxes", data)
}

// listAll lists up to maxTableRows sandboxes.
func listAll(ctx context.Context, opts *sdk.ListOptions) ([]sdk.SandboxInfo, bool, error) {
	var out []sdk.SandboxInfo
	for info, err := range sdk.List(ctx, opts) {
		if err != nil {
			return out, false, err
		}
		if len(out) == maxTableRows {
			return out, true, nil
		}
		out = append(out, info)
	}
	return out, false, nil
}

// parseMetadata parses "k=v, k2=v2" (commas or newlines between pairs).
func parseMetadata(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, pair := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("metadata filter %q: write key=value pairs separated by commas", pair)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// actions runs the form actions of the sandboxes table and the sandbox page:
// do = kill:ID, pause:ID, resume:ID, extend:ID (by the form's minutes) or
// kill-selected (the checked ids), then returns to the form's page with a
// message saying what happened.
func (d *Dashboard) actions(w http.ResponseWriter, r *http.Request, sess *session) {
	back := safeNext(r.PostFormValue("back"))
	verb, id, _ := strings.Cut(r.PostFormValue("do"), ":")
	ids := []string{id}
	if verb == "kill-selected" {
		verb, ids = "kill", r.PostForm["ids"]
	}
	if len(ids) == 0 || ids[0] == "" {
		d.sessions.setFlash(sess, "Select at least one sandbox.")
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	minutes, _ := strconv.Atoi(r.PostFormValue("minutes"))
	var done []string
	var failed []string
	for _, id := range ids {
		if err := d.act(r.Context(), sess, verb, id, minutes); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %s", id, errorText(err)))
			continue
		}
		done = append(done, id)
	}
	msg := actionMessage(verb, done, minutes)
	if len(failed) > 0 {
		msg += " Failed: " + strings.Join(failed, "; ")
	}
	if verb == "kill" && len(done) > 0 && strings.HasPrefix(back, Prefix+"/sandboxes/") {
		back = Prefix + "/sandboxes" // the sandbox's own page is gone
	}
	d.sessions.setFlash(sess, msg)
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// act runs one lifecycle action on sandbox id through the API.
func (d *Dashboard) act(ctx context.Context, sess *session, verb, id string, minutes int) error {
	conn := d.conn(sess)
	switch verb {
	case "kill":
		return sdk.Kill(ctx, id, &conn)
	case "pause":
		_, err := sdk.Pause(ctx, id, nil, &conn)
		return err
	case "resume":
		sb, err := sdk.Connect(ctx, id, &sdk.ConnectOptions{ConnectionOptions: conn})
		if err == nil {
			sb.Close()
		}
		return err
	case "extend":
		if minutes < 1 || minutes > maxExtendMinutes {
			return fmt.Errorf("extend by 1 to %d minutes", maxExtendMinutes)
		}
		return sdk.SetTimeout(ctx, id, time.Duration(minutes)*time.Minute, &conn)
	}
	return errors.New("unknown action " + strconv.Quote(verb))
}

func actionMessage(verb string, done []string, minutes int) string {
	if len(done) == 0 {
		return "Nothing was done."
	}
	what := fmt.Sprintf("sandbox %s", done[0])
	if len(done) > 1 {
		what = fmt.Sprintf("%d sandboxes", len(done))
	}
	switch verb {
	case "kill":
		return "Killed " + what + "."
	case "pause":
		return "Paused " + what + "."
	case "resume":
		return "Resumed " + what + "."
	}
	return fmt.Sprintf("The timeout of %s now ends in %d minutes.", what, minutes)
}

type sandboxData struct {
	Info sdk.SandboxInfo
	Back string
}

// sandboxPage shows one sandbox; its live parts load through the API.
func (d *Dashboard) sandboxPage(w http.ResponseWriter, r *http.Request, sess *session) {
	id := r.PathValue("id")
	info, err := sdk.GetInfo(r.Context(), id, new(d.conn(sess)))
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, sdk.ErrNotFound) {
			status = http.StatusNotFound
		}
		d.errorPage(w, r, status, errorText(err))
		return
	}
	d.page(w, sess, http.StatusOK, "sandbox", "Sandbox "+id, "sandboxes", sandboxData{Info: *info, Back: r.URL.Path})
}
