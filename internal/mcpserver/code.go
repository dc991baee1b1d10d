package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cubby-dev/cubby/sdk"
)

// Cell timeouts of run_code, seconds.
const (
	defaultCellSeconds = 300
	maxCellSeconds     = 3600
)

type runCodeArgs struct {
	Code           string `json:"code" jsonschema:"The code to run, as one notebook cell: statements run in order and the value of the last expression is returned as a result. Charts (matplotlib) come back as PNG images."`
	Language       string `json:"language,omitempty" jsonschema:"python (default), javascript, typescript, r, java or bash. Each language keeps its own state across calls."`
	Context        string `json:"context,omitempty" jsonschema:"Optional label of a separate interpreter state: calls with the same label share variables; a new label starts a fresh state in the given language. An existing code context ID works too."`
	Sandbox        string `json:"sandbox,omitempty" jsonschema:"ID of the sandbox to run in. Default: this session's own sandbox, created on first use."`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"Interrupt the cell after this many seconds (default 300, at most 3600)."`
}

type runCodeResult struct {
	Sandbox   string       `json:"sandbox" jsonschema:"ID of the sandbox the cell ran in."`
	Stdout    string       `json:"stdout"`
	Stderr    string       `json:"stderr"`
	Results   []cellResult `json:"results" jsonschema:"Displayed values in order; the value of the last expression has is_main_result."`
	Error     *cellError   `json:"error,omitempty" jsonschema:"The exception the cell raised, if any."`
	Truncated bool         `json:"truncated" jsonschema:"Some output was cut (see the …[N bytes truncated]… markers)."`
	Note      string       `json:"note,omitempty"`
}

type cellResult struct {
	Text         string   `json:"text,omitempty" jsonschema:"Plain-text form (a DataFrame as a text table)."`
	Formats      []string `json:"formats" jsonschema:"Formats the kernel produced: text, html, png, chart, data …"`
	IsMainResult bool     `json:"is_main_result,omitempty"`
	ChartType    string   `json:"chart_type,omitempty"`
	ChartTitle   string   `json:"chart_title,omitempty"`
	Image        string   `json:"image,omitempty" jsonschema:"MIME type of the image this result adds to the content (image/png, image/jpeg)."`
}

type cellError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

func (t *tools) registerCode(srv *mcp.Server) {
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "run_code",
		Title: "Run code",
		Description: "Run code in a sandbox's Jupyter-style interpreter and return stdout, stderr, the error with its traceback, " +
			"and results: charts and images as PNG image content, DataFrames as text tables. State (variables, imports) " +
			"persists across calls in the same sandbox, language and context. Sends progress notifications with the output " +
			"as it arrives; cancelling the call interrupts the cell.",
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: new(false)},
	}, t.runCode)
}

func (t *tools) runCode(ctx context.Context, req *mcp.CallToolRequest, in runCodeArgs) (*mcp.CallToolResult, runCodeResult, error) {
	timeout, err := seconds("timeout_seconds", in.TimeoutSeconds, defaultCellSeconds, maxCellSeconds)
	if err != nil {
		return nil, runCodeResult{}, err
	}
	st, sb, note, err := t.target(ctx, req, in.Sandbox)
	if err != nil {
		return nil, runCodeResult{}, err
	}
	opts := &sdk.RunCodeOptions{Language: in.Language, Timeout: timeout}
	if in.Context != "" {
		cc, err := st.codeContext(ctx, sb, in.Context, in.Language)
		if err != nil {
			return nil, runCodeResult{}, err
		}
		opts.Language, opts.Context = "", cc
	}
	p := newProgress(req)
	opts.OnStdout = func(m sdk.OutputMessage) { p.Report(ctx, m.Line) }
	opts.OnStderr = func(m sdk.OutputMessage) { p.Report(ctx, m.Line) }
	exec, err := sb.RunCode(ctx, in.Code, opts)
	p.Flush(ctx)
	if err != nil {
		return nil, runCodeResult{}, st.fail("run_code", sb.ID(), err)
	}
	out, content := t.cellOutput(exec)
	out.Sandbox, out.Note = sb.ID(), note
	return &mcp.CallToolResult{Content: append([]mcp.Content{&mcp.TextContent{Text: cellText(out)}}, content...)}, out, nil
}

// codeContext returns the context a run_code label names: one made earlier
// in this session for the label, an existing context with that ID, or a new
// one in language.
func (s *session) codeContext(ctx context.Context, sb *sdk.Sandbox, label, language string) (*sdk.CodeContext, error) {
	k := key(sb.ID(), label)
	s.mu.Lock()
	cc, ok := s.contexts[k]
	s.mu.Unlock()
	if ok {
		return cc, nil
	}
	all, err := sb.ListCodeContexts(ctx)
	if err != nil {
		return nil, s.fail("list code contexts", sb.ID(), err)
	}
	for i := range all {
		if all[i].ID == label {
			cc = &all[i]
		}
	}
	if cc == nil {
		if cc, err = sb.CreateCodeContext(ctx, &sdk.CodeContextOptions{Language: language}); err != nil {
			return nil, s.fail("create code context", sb.ID(), err)
		}
	}
	s.mu.Lock()
	s.contexts[k] = cc
	s.mu.Unlock()
	return cc, nil
}

// cellOutput converts an execution into the structured result and the image
// content of its PNG and JPEG results, clipping long text.
func (t *tools) cellOutput(exec *sdk.Execution) (runCodeResult, []mcp.Content) {
	limit := t.svc.cfg.OutputLimit
	var out runCodeResult
	var cut [3]bool
	out.Stdout, cut[0] = clipText(strings.Join(exec.Logs.Stdout, ""), limit)
	out.Stderr, cut[1] = clipText(strings.Join(exec.Logs.Stderr, ""), limit)
	out.Results = []cellResult{}
	var images []mcp.Content
	for _, r := range exec.Results {
		cr := cellResult{Formats: r.Formats(), IsMainResult: r.IsMainResult}
		var c bool
		cr.Text, c = clipText(r.Text, limit)
		cut[2] = cut[2] || c
		if r.Chart != nil {
			cr.ChartType, cr.ChartTitle = string(r.Chart.ChartType()), r.Chart.ChartTitle()
		}
		if img := imageOf(r); img != nil {
			cr.Image = img.MIMEType
			images = append(images, img)
		}
		out.Results = append(out.Results, cr)
	}
	if e := exec.Error; e != nil {
		tb, c := clipText(e.Traceback, limit)
		out.Error = &cellError{Name: e.Name, Value: e.Value, Traceback: tb}
		cut[2] = cut[2] || c
	}
	out.Truncated = cut[0] || cut[1] || cut[2]
	return out, images
}

// imageOf returns a result's PNG (else JPEG) as image content, nil if none.
func imageOf(r sdk.Result) *mcp.ImageContent {
	if b, err := r.PNGBytes(); err == nil && len(b) > 0 {
		return &mcp.ImageContent{Data: b, MIMEType: "image/png"}
	}
	if b, err := r.JPEGBytes(); err == nil && len(b) > 0 {
		return &mcp.ImageContent{Data: b, MIMEType: "image/jpeg"}
	}
	return nil
}

// cellText renders a cell's output as the text an LLM reads first.
func cellText(out runCodeResult) string {
	var b strings.Builder
	section := func(title, body string) {
		if body != "" {
			fmt.Fprintf(&b, "[%s]\n%s", title, body)
			if !strings.HasSuffix(body, "\n") {
				b.WriteByte('\n')
			}
		}
	}
	if out.Note != "" {
		section("note", out.Note)
	}
	section("stdout", out.Stdout)
	section("stderr", out.Stderr)
	for i, r := range out.Results {
		title := fmt.Sprintf("result %d", i+1)
		if r.IsMainResult {
			title += " (value of the last expression)"
		}
		body := r.Text
		if r.Image != "" {
			body += fmt.Sprintf("(%s image attached)\n", r.Image)
		}
		section(title, body)
	}
	if e := out.Error; e != nil {
		section("error", fmt.Sprintf("%s: %s\n%s", e.Name, e.Value, e.Traceback))
	}
	if b.Len() == 0 {
		return fmt.Sprintf("(the cell ran in sandbox %s and printed nothing)", out.Sandbox)
	}
	return b.String()
}
