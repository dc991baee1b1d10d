package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// Limits of the sandbox page's API calls.
const (
	metricsWindow   = 30 * time.Minute // the metrics chart's span
	logsPageLines   = 500              // log lines per poll
	connectTimeout  = time.Minute      // deadline a connect ensures (it never shortens one)
	maxUploadBytes  = 512 << 20        // one upload request
	maxCodeBytes    = 1 << 20          // one notebook cell
	maxListEntries  = 2000             // one directory listing
	streamKeepAlive = 15 * time.Second // blank lines on an idle execute stream
)

// errPaused refuses envd calls on a paused sandbox (connecting would resume it).
var errPaused = errors.New("the sandbox is paused: resume it first")

// apiFail answers err in the API's error shape with a fitting status.
func apiFail(w http.ResponseWriter, err error) {
	var nf *sdk.NotFoundError
	var inv *sdk.InvalidArgumentError
	var auth *sdk.AuthenticationError
	switch {
	case errors.As(err, &auth):
		writeError(w, http.StatusForbidden, errorText(err)) // not 401: the session itself is valid
	case errors.Is(err, errPaused):
		writeError(w, http.StatusConflict, err.Error())
	case errors.As(err, &nf):
		writeError(w, http.StatusNotFound, errorText(err))
	case errors.As(err, &inv):
		writeError(w, http.StatusBadRequest, inv.Message)
	case errors.Is(err, context.Canceled):
		writeError(w, 499, "cancelled")
	default:
		writeError(w, http.StatusBadGateway, errorText(err))
	}
}

// running connects to a running sandbox of the session for envd calls; a
// paused one is refused (errPaused) rather than silently resumed.
func (d *Dashboard) running(ctx context.Context, sess *session, id string) (*sdk.Sandbox, error) {
	conn := d.conn(sess)
	info, err := sdk.GetInfo(ctx, id, &conn)
	if err != nil {
		return nil, err
	}
	if info.State == sdk.StatePaused {
		return nil, errPaused
	}
	return sdk.Connect(ctx, id, &sdk.ConnectOptions{ConnectionOptions: conn, Timeout: connectTimeout})
}

// sandboxHandler serves a request about a running sandbox (connected).
type sandboxHandler func(w http.ResponseWriter, r *http.Request, sb *sdk.Sandbox)

// withSandbox connects to the session's running sandbox {id} for h (see
// running); failing that it answers in the API's error shape.
func (d *Dashboard) withSandbox(h sandboxHandler) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, sess *session) {
		sb, err := d.running(r.Context(), sess, r.PathValue("id"))
		if err != nil {
			apiFail(w, err)
			return
		}
		defer sb.Close()
		h(w, r, sb)
	}
}

type metricPoint struct {
	T         int64   `json:"t"` // unix ms
	CPU       float64 `json:"cpu"`
	MemUsed   int64   `json:"mem"`
	MemTotal  int64   `json:"memTotal"`
	DiskUsed  int64   `json:"disk"`
	DiskTotal int64   `json:"diskTotal"`
}

// metricsJSON returns the sandbox's samples of the last metricsWindow.
func (d *Dashboard) metricsJSON(w http.ResponseWriter, r *http.Request, sess *session) {
	ms, err := sdk.GetMetrics(r.Context(), r.PathValue("id"), &sdk.MetricsOptions{Start: time.Now().Add(-metricsWindow)}, new(d.conn(sess)))
	if err != nil {
		apiFail(w, err)
		return
	}
	out := make([]metricPoint, 0, len(ms))
	for _, m := range ms {
		out = append(out, metricPoint{T: m.Timestamp.UnixMilli(), CPU: m.CPUUsedPct, MemUsed: m.MemUsed,
			MemTotal: m.MemTotal, DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal})
	}
	writeJSON(w, http.StatusOK, out)
}

type logLine struct {
	T       int64             `json:"t"` // unix ms
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// logsJSON returns log lines stamped at or after ?since (unix ms; default
// the last logsPageLines lines).
func (d *Dashboard) logsJSON(w http.ResponseWriter, r *http.Request, sess *session) {
	opts := &sdk.LogsOptions{ConnectionOptions: d.conn(sess), Limit: logsPageLines}
	if s := r.URL.Query().Get("since"); s != "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 {
			writeError(w, http.StatusBadRequest, "since must be unix milliseconds")
			return
		}
		opts.Start = time.UnixMilli(ms)
	}
	lines, err := sdk.GetLogs(r.Context(), r.PathValue("id"), opts)
	if err != nil {
		apiFail(w, err)
		return
	}
	out := make([]logLine, 0, len(lines))
	for _, l := range lines {
		out = append(out, logLine{T: l.Timestamp.UnixMilli(), Level: l.Level, Message: l.Message, Fields: l.Fields})
	}
	writeJSON(w, http.StatusOK, out)
}

type fileEntry struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	Modified int64  `json:"modified"` // unix ms
}

// filesJSON lists directory ?path (default the user's home).
func filesJSON(w http.ResponseWriter, r *http.Request, sb *sdk.Sandbox) {
	dir := r.URL.Query().Get("path")
	if dir == "" {
		dir = "."
	}
	info, err := sb.Files.GetInfo(r.Context(), dir, nil)
	if err != nil {
		apiFail(w, err)
		return
	}
	entries, err := sb.Files.List(r.Context(), info.Path, nil)
	if err != nil {
		apiFail(w, err)
		return
	}
	out := struct {
		Path      string      `json:"path"`
		Entries   []fileEntry `json:"entries"`
		Truncated bool        `json:"truncated"`
	}{Path: info.Path, Entries: []fileEntry{}}
	for i, e := range entries {
		if i == maxListEntries {
			out.Truncated = true
			break
		}
		out.Entries = append(out.Entries, fileEntry{Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Modified: e.ModifiedTime.UnixMilli()})
	}
	writeJSON(w, http.StatusOK, out)
}

// download streams file ?path as an attachment.
func download(w http.ResponseWriter, r *http.Request, sb *sdk.Sandbox) {
	p := r.URL.Query().Get("path")
	info, err := sb.Files.GetInfo(r.Context(), p, nil)
	if err == nil && info.Type == sdk.FileTypeDir {
		err = &sdk.InvalidArgumentError{Message: p + " is a directory"}
	}
	if err != nil {
		apiFail(w, err)
		return
	}
	rc, err := sb.Files.ReadStream(r.Context(), info.Path, nil)
	if err != nil {
		apiFail(w, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(info.Path)}))
	w.Header().Set("Content-Length", strconv.FormatInt(info.Size, 10))
	_, _ = io.Copy(w, rc)
}

// upload writes the files of a multipart form into directory ?path.
func upload(w http.ResponseWriter, r *http.Request, sb *sdk.Sandbox) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUploadBytes)
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, http.StatusBadRequest, "want a multipart/form-data body: "+err.Error())
		return
	}
	dir := r.URL.Query().Get("path")
	var written []string
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, "read upload: "+err.Error())
			return
		}
		name := part.FileName()
		if name == "" {
			continue
		}
		if name = path.Base(strings.ReplaceAll(name, "\\", "/")); name == "." || name == ".." || name == "/" {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("bad file name %q", part.FileName()))
			return
		}
		wi, err := sb.Files.WriteReader(r.Context(), path.Join(dir, name), part, nil)
		if err != nil {
			apiFail(w, err)
			return
		}
		written = append(written, wi.Path)
	}
	writeJSON(w, http.StatusOK, map[string]any{"written": written})
}

// contextsJSON lists the sandbox's code contexts.
func contextsJSON(w http.ResponseWriter, r *http.Request, sb *sdk.Sandbox) {
	list, err := sb.ListCodeContexts(r.Context())
	if err != nil {
		apiFail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

type executeRequest struct {
	Code     string `json:"code"`
	Language string `json:"language"`
	Context  string `json:"context"` // a context ID; overrides language
}

// execute runs a notebook cell and streams what it prints and displays as
// NDJSON events: {"type":"stdout"|"stderr","text"}, {"type":"result",...},
// {"type":"error","name","value","traceback"}, then {"type":"end"} or
// {"type":"failure","message"}. Closing the request interrupts the cell.
func execute(w http.ResponseWriter, r *http.Request, sb *sdk.Sandbox) {
	var req executeRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxCodeBytes)).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "want a JSON body {code, language?, context?}: "+err.Error())
		return
	}
	ev := newEventStream(w)
	defer ev.stop()
	opts := &sdk.RunCodeOptions{Language: req.Language, Timeout: sdk.NoTimeout,
		OnStdout: func(m sdk.OutputMessage) { ev.send(map[string]any{"type": "stdout", "text": m.Line}) },
		OnStderr: func(m sdk.OutputMessage) { ev.send(map[string]any{"type": "stderr", "text": m.Line}) },
		OnResult: func(res sdk.Result) { ev.send(resultEvent(res)) },
		OnError: func(e sdk.ExecutionError) {
			ev.send(map[string]any{"type": "error", "name": e.Name, "value": e.Value, "traceback": e.Traceback})
		},
	}
	if req.Context != "" {
		opts.Language, opts.Context = "", &sdk.CodeContext{ID: req.Context}
	}
	if _, err := sb.RunCode(r.Context(), req.Code, opts); err != nil {
		ev.send(map[string]any{"type": "failure", "message": errorText(err)})
		return
	}
	ev.send(map[string]any{"type": "end"})
}

// resultEvent is a displayed value in the formats the page can show: text,
// HTML (shown in a sandboxed frame), PNG, JPEG and SVG (as images).
func resultEvent(r sdk.Result) map[string]any {
	ev := map[string]any{"type": "result", "main": r.IsMainResult, "formats": r.Formats()}
	for k, v := range map[string]string{"text": r.Text, "html": r.HTML, "png": r.PNG, "jpeg": r.JPEG, "svg": r.SVG, "markdown": r.Markdown} {
		if v != "" {
			ev[k] = v
		}
	}
	if r.Chart != nil {
		ev["chart"] = map[string]string{"type": string(r.Chart.ChartType()), "title": r.Chart.ChartTitle()}
	}
	return ev
}
