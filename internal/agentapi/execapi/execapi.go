// Package execapi is the wire contract of the code interpreter (port
// agentapi.InterpreterPort inside every sandbox): the POST /execute request and
// the NDJSON lines it streams back, and the /contexts requests and responses
// (docs/wire/code-interpreter.md). The agent's interpreter encodes these types
// and the Go SDK decodes them, so both speak from one definition.
//
// Field order follows the JSON names alphabetically wherever the agent used to
// encode a map, so that the bytes on the wire are the ones clients always got.
package execapi

import (
	"encoding/json"
	"net/url"
)

// Paths of the code-interpreter API.
const (
	// PathExecute runs code: POST, body ExecuteRequest, answered with an
	// application/x-ndjson stream of lines (Executions, Output, Result,
	// Error, Marker).
	PathExecute = "/execute"
	// PathContexts lists (GET, answered []Context) and creates (POST, body
	// CreateContextRequest, answered Context) code contexts; ContextPath(id)
	// deletes one (DELETE) and ContextPath(id)+PathRestart restarts it (POST).
	PathContexts = "/contexts"
	// PathRestart is the suffix of a context's restart path.
	PathRestart = "/restart"
)

// ContextPath returns the path of one context, PathContexts + "/" + the
// escaped id.
func ContextPath(id string) string { return PathContexts + "/" + url.PathEscape(id) }

// ExecuteRequest is the POST /execute body. At most one of ContextID and
// Language may be set; neither runs the code in the default Python context.
// Absent fields are omitted (the Python SDK sends null, which decodes the same).
type ExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"` // for this execution only
	Language  *string           `json:"language,omitempty"`
}

// CreateContextRequest is the POST /contexts body. User is Cubby's: the
// account the context's kernel runs as (default root, as on E2B).
type CreateContextRequest struct {
	Cwd      *string `json:"cwd,omitempty"`
	Language *string `json:"language,omitempty"`
	User     *string `json:"user,omitempty"`
}

// Context is a code context as the /contexts API returns it.
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// Types of the /execute stream's lines: every line is a JSON object whose
// "type" is one of these.
const (
	TypeExecutions = "number_of_executions" // Executions
	TypeStdout     = "stdout"               // Output
	TypeStderr     = "stderr"               // Output
	TypeResult     = "result"               // Result
	TypeError      = "error"                // Error
	TypeKeepalive  = "keepalive"            // Marker, while the execution is idle
	TypeEnd        = "end_of_execution"     // Marker, the stream's last line
)

// Line is the part every line shares: read it first to know which type the
// whole line decodes into.
type Line struct {
	Type string `json:"type"`
}

// Marker is a line that carries nothing but its type (TypeKeepalive, TypeEnd).
type Marker struct {
	Type string `json:"type"`
}

// Executions is the TypeExecutions line: the kernel's execution counter for
// this execution.
type Executions struct {
	ExecutionCount int    `json:"execution_count"`
	Type           string `json:"type"`
}

// NewExecutions returns the TypeExecutions line for count n.
func NewExecutions(n int) Executions { return Executions{ExecutionCount: n, Type: TypeExecutions} }

// Output is a TypeStdout or TypeStderr line: one chunk of output (it may end
// mid-line) and when the kernel produced it (ISO 8601, microseconds, UTC).
type Output struct {
	Text      string `json:"text"`
	Timestamp string `json:"timestamp"`
	Type      string `json:"type"`
}

// Error is the TypeError line: what the code raised (Name is the exception
// class, Value its message, Traceback the formatted traceback as one string),
// or the interpreter's own reason the execution failed. A stream has at most
// one.
type Error struct {
	Name      string `json:"name"`
	Traceback string `json:"traceback"`
	Type      string `json:"type"`
	Value     string `json:"value"`
}

// NewError returns the TypeError line.
func NewError(name, value, traceback string) Error {
	return Error{Name: name, Traceback: traceback, Type: TypeError, Value: value}
}

// Result is the TypeResult line: one displayed value in every format the
// kernel produced. Known MIME types (see NewResult) are fields holding the JSON
// value the kernel sent (text/plain as a string with one pair of surrounding
// quotes stripped); absent formats are omitted. Other MIME types are in Extra,
// which is always present. IsMainResult marks the value of the code's last
// expression.
type Result struct {
	Chart        json.RawMessage            `json:"chart,omitempty"`
	Data         json.RawMessage            `json:"data,omitempty"`
	Extra        map[string]json.RawMessage `json:"extra"`
	HTML         json.RawMessage            `json:"html,omitempty"`
	IsMainResult bool                       `json:"is_main_result"`
	JavaScript   json.RawMessage            `json:"javascript,omitempty"`
	JPEG         json.RawMessage            `json:"jpeg,omitempty"`
	JSON         json.RawMessage            `json:"json,omitempty"`
	LaTeX        json.RawMessage            `json:"latex,omitempty"`
	Markdown     json.RawMessage            `json:"markdown,omitempty"`
	PDF          json.RawMessage            `json:"pdf,omitempty"`
	PNG          json.RawMessage            `json:"png,omitempty"`
	SVG          json.RawMessage            `json:"svg,omitempty"`
	Text         json.RawMessage            `json:"text,omitempty"`
	Type         string                     `json:"type"`
}

// mimeKeys maps the MIME types a Result lifts to its own fields to their JSON
// names.
var mimeKeys = map[string]string{
	"text/plain":             "text",
	"text/html":              "html",
	"text/markdown":          "markdown",
	"image/svg+xml":          "svg",
	"image/png":              "png",
	"image/jpeg":             "jpeg",
	"application/pdf":        "pdf",
	"text/latex":             "latex",
	"application/json":       "json",
	"application/javascript": "javascript",
	"e2b/data":               "data",
	"e2b/chart":              "chart",
}

// NewResult converts a Jupyter MIME bundle (MIME type → JSON value) into a
// Result line: text/plain, text/html, text/markdown, image/svg+xml,
// image/png, image/jpeg, application/pdf, text/latex, application/json,
// application/javascript, e2b/data and e2b/chart are lifted to their fields,
// the rest goes to Extra; main marks the value of the code's last expression.
func NewResult(bundle map[string]json.RawMessage, main bool) Result {
	r := Result{Extra: map[string]json.RawMessage{}, IsMainResult: main, Type: TypeResult}
	for mime, v := range bundle {
		key, ok := mimeKeys[mime]
		if !ok {
			r.Extra[mime] = v
			continue
		}
		if key == "text" {
			var s string
			if json.Unmarshal(v, &s) == nil {
				v, _ = json.Marshal(stripQuotes(s))
			}
		}
		*r.Format(key) = v
	}
	return r
}

// Format returns the field of r that holds the format named key ("text",
// "png", "chart" …: a Result field's JSON name), nil for another key.
func (r *Result) Format(key string) *json.RawMessage {
	switch key {
	case "text":
		return &r.Text
	case "html":
		return &r.HTML
	case "markdown":
		return &r.Markdown
	case "svg":
		return &r.SVG
	case "png":
		return &r.PNG
	case "jpeg":
		return &r.JPEG
	case "pdf":
		return &r.PDF
	case "latex":
		return &r.LaTeX
	case "json":
		return &r.JSON
	case "javascript":
		return &r.JavaScript
	case "data":
		return &r.Data
	case "chart":
		return &r.Chart
	}
	return nil
}

// IsField reports whether key is the JSON name of one of Result's fields (a
// format, "type", "is_main_result" or "extra"); a client keeps other keys of a
// result line as extra formats.
func IsField(key string) bool {
	return key == "type" || key == "is_main_result" || key == "extra" || (&Result{}).Format(key) != nil
}

// stripQuotes removes one pair of matching surrounding ' or " quotes.
func stripQuotes(s string) string {
	if len(s) >= 2 && (s[0] == '\'' || s[0] == '"') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}
