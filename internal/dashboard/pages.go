package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// pages are the parsed HTML templates, one set per page (each with the
// layout).
type pages struct {
	byName  map[string]*template.Template
	version string
}

// pageData is what every page template gets.
type pageData struct {
	Title   string
	Nav     string // active navigation entry
	Page    string // data-page of <body>, selecting the page's script
	CSRF    string
	Flash   string
	Version string
	Data    any
}

func loadPages(as *assets, version string) (*pages, error) {
	funcs := template.FuncMap{
		"asset":    as.URL,
		"bytes":    humanBytes,
		"ago":      ago,
		"until":    until,
		"rfc3339":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"clock":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
		"pathJoin": func(a, b string) string { return strings.TrimRight(a, "/") + "/" + b },
	}
	names, err := fs.Glob(web, "web/templates/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}, version: version}
	for _, n := range names {
		base := strings.TrimSuffix(n[len("web/templates/"):], ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(web, "web/templates/layout.html", n)
		if err != nil {
			return nil, fmt.Errorf("dashboard template %s: %w", base, err)
		}
		p.byName[base] = t
	}
	return p, nil
}

// render writes page name with status. A template failure is a 500 with a
// plain message (nothing half-written).
func (p *pages) render(w http.ResponseWriter, status int, name string, data pageData) {
	data.Version = p.version
	if data.Page == "" {
		data.Page = name
	}
	var buf bytes.Buffer
	if err := p.byName[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		http.Error(w, "dashboard page "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// page renders a page of a logged-in session (with its CSRF token and flash).
func (d *Dashboard) page(w http.ResponseWriter, sess *session, status int, name, title, nav string, data any) {
	d.pages.render(w, status, name, pageData{Title: title, Nav: nav, CSRF: sess.csrf,
		Flash: d.sessions.takeFlash(sess), Data: data})
}

// errorPage renders a page saying what went wrong.
func (d *Dashboard) errorPage(w http.ResponseWriter, r *http.Request, status int, msg string) {
	data := pageData{Title: http.StatusText(status), Page: "error", Data: msg}
	if sess := d.sessions.get(r); sess != nil {
		data.CSRF = sess.csrf
	}
	d.pages.render(w, status, "error", data)
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status, body = http.StatusInternalServerError, []byte(`{"code":500,"message":"encode response"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeError answers {"code":status,"message":msg}, the API's error shape.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// safeNext returns next when it is a dashboard path (no open redirect),
// else the overview.
func safeNext(next string) string {
	if strings.HasPrefix(next, Prefix+"/") && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") {
		if u, err := url.Parse(next); err == nil && u.Host == "" && u.Scheme == "" {
			return next
		}
	}
	return Prefix + "/"
}

// humanBytes formats n bytes with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ago formats the time since t ("3m ago").
func ago(t time.Time) string { return short(time.Since(t)) + " ago" }

// until formats the time until t ("in 4m"; "now" when past).
func until(t time.Time) string {
	d := time.Until(t)
	if d <= 0 {
		return "now"
	}
	return "in " + short(d)
}

func short(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
