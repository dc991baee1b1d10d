package sdk

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

// Execution is the outcome of RunCode (docs/wire/code-interpreter.md §4.2).
type Execution struct {
	// Results are the cell's displayed values in order; the value of the
	// cell's last expression has IsMainResult.
	Results []Result
	// Logs are the stdout and stderr chunks printed by the cell.
	Logs Logs
	// Error is the cell's error (the first one), nil if it succeeded.
	Error *ExecutionError
	// ExecutionCount is the kernel's execution counter for this cell (0 when
	// the server sent none).
	ExecutionCount int
}

// Text returns the text of the main result, "" if there is none.
func (e *Execution) Text() string {
	for _, r := range e.Results {
		if r.IsMainResult {
			return r.Text
		}
	}
	return ""
}

// Logs hold the output streams of an execution, one element per chunk.
type Logs struct {
	Stdout []string
	Stderr []string
}

// OutputMessage is one stdout or stderr chunk passed to RunCode callbacks.
type OutputMessage struct {
	Line string
	// Timestamp is the kernel's time of the output (zero when unknown).
	Timestamp time.Time
	// Error is true for stderr.
	Error bool
}

// ExecutionError is an error raised by a cell: Name is the exception class
// (e.g. "NameError"), Value its message and Traceback the formatted traceback.
// It implements error so it can be returned as one.
type ExecutionError struct {
	Name      string
	Value     string
	Traceback string
}

// Error implements error as "<Name>: <Value>".
func (e *ExecutionError) Error() string { return e.Name + ": " + e.Value }

// Result is one displayed value of a cell in all the formats the kernel
// produced (docs/wire/code-interpreter.md §4.2): text/plain → Text, image/png → PNG (base64), and
// so on. Formats the SDK does not know are in Extra by MIME type.
type Result struct {
	Text       string
	HTML       string
	Markdown   string
	SVG        string
	PNG        string // base64
	JPEG       string // base64
	PDF        string // base64
	LaTeX      string
	JSON       map[string]any
	JavaScript string
	// Data is a pandas DataFrame as column name → values (docs/wire/code-interpreter.md §4.3).
	Data map[string]any
	// Chart is the decoded matplotlib chart (docs/wire/code-interpreter.md §4.4), nil if none.
	Chart Chart
	// Extra holds other MIME types as sent.
	Extra map[string]any
	// IsMainResult marks the value of the cell's last expression.
	IsMainResult bool
}

// Formats lists the formats present, in the order text, html, markdown, svg,
// png, jpeg, pdf, latex, json, javascript, data, chart, then the Extra keys
// sorted.
func (r *Result) Formats() []string {
	var out []string
	add := func(name string, ok bool) {
		if ok {
			out = append(out, name)
		}
	}
	add("text", r.Text != "")
	add("html", r.HTML != "")
	add("markdown", r.Markdown != "")
	add("svg", r.SVG != "")
	add("png", r.PNG != "")
	add("jpeg", r.JPEG != "")
	add("pdf", r.PDF != "")
	add("latex", r.LaTeX != "")
	add("json", r.JSON != nil)
	add("javascript", r.JavaScript != "")
	add("data", r.Data != nil)
	add("chart", r.Chart != nil)
	return append(out, slices.Sorted(maps.Keys(r.Extra))...)
}

// PNGBytes decodes the base64 PNG ("" → nil, nil).
func (r *Result) PNGBytes() ([]byte, error) { return decodeB64("png", r.PNG) }

// JPEGBytes decodes the base64 JPEG ("" → nil, nil).
func (r *Result) JPEGBytes() ([]byte, error) { return decodeB64("jpeg", r.JPEG) }

func decodeB64(name, s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", name, err)
	}
	return b, nil
}

// parseResult decodes a result line (execapi.Result); keys beyond its fields
// are formats too and go to Extra. Errors: the line is not a JSON object.
// Values of the wrong type leave their field empty.
func parseResult(line []byte) (Result, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil {
		return Result{}, err
	}
	var l execapi.Result
	_ = json.Unmarshal(line, &l) // a mistyped field stays zero; the others decode
	r := Result{Extra: map[string]any{}, IsMainResult: l.IsMainResult}
	for key, dst := range map[string]*string{"text": &r.Text, "html": &r.HTML, "markdown": &r.Markdown, "svg": &r.SVG,
		"png": &r.PNG, "jpeg": &r.JPEG, "pdf": &r.PDF, "latex": &r.LaTeX, "javascript": &r.JavaScript} {
		_ = json.Unmarshal(*l.Format(key), dst)
	}
	_ = json.Unmarshal(l.JSON, &r.JSON)
	_ = json.Unmarshal(l.Data, &r.Data)
	for k, raw := range l.Extra {
		var v any
		_ = json.Unmarshal(raw, &v)
		r.Extra[k] = v
	}
	if l.Chart != nil {
		r.Chart = parseChart(l.Chart)
	}
	for k, v := range fields {
		if execapi.IsField(k) {
			continue
		}
		var val any
		if json.Unmarshal(v, &val) == nil && val != nil {
			r.Extra[k] = val
		}
	}
	return r, nil
}
