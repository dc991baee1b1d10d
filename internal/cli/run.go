package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/sdk"
)

// codeInterpreterTemplate is the template `cubby run` creates sandboxes from.
const codeInterpreterTemplate = "code-interpreter"

// runJSON is the --json result of `cubby run`.
type runJSON struct {
	SandboxID string          `json:"sandboxID"`
	Stdout    []string        `json:"stdout"`
	Stderr    []string        `json:"stderr"`
	Results   []runResultJSON `json:"results"`
	Error     *runErrorJSON   `json:"error"`
}

// runResultJSON is one displayed value; PNGFile is where its PNG was saved.
type runResultJSON struct {
	Formats      []string       `json:"formats"`
	Text         string         `json:"text,omitempty"`
	HTML         string         `json:"html,omitempty"`
	Markdown     string         `json:"markdown,omitempty"`
	JSON         map[string]any `json:"json,omitempty"`
	Data         map[string]any `json:"data,omitempty"`
	Chart        sdk.Chart      `json:"chart,omitempty"`
	PNGFile      string         `json:"pngFile,omitempty"`
	IsMainResult bool           `json:"isMainResult"`
}

// runErrorJSON is the error a cell raised.
type runErrorJSON struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// runFlags are the options of `cubby run`.
type runFlags struct {
	lang, template, sandbox, outDir string
	timeout                         time.Duration
	asJSON                          bool
}

// newRunCmd is `cubby run`: code executed by the sandbox's code interpreter
// (POST /execute, docs/wire/code-interpreter.md §4) with streamed output, printed results and PNG
// charts saved to files.
func newRunCmd(c *clientFlags) *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "run [flags] <code|file|->",
		Short: "Run code in a code-interpreter sandbox and print its output, results and charts",
		Long: `Run code in a sandbox's code interpreter: the argument is a file to read, - for
stdin, or else the code itself. The language comes from --lang, else the file
extension (.py .js .ts .r .java .sh), else python.

Without --sandbox a sandbox is created from --template and killed afterwards.
Output is streamed; results are printed; PNG images (matplotlib charts) are saved
as cubby-chart-<n>.png in --out-dir and their paths printed. An error raised by
the code is printed with its traceback and cubby exits with status 1.`,
		Args: cobra.ExactArgs(1),
		RunE: c.run(func(cmd *cobra.Command, args []string) error {
			code, lang, err := readCode(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			if rf.lang != "" {
				lang = rf.lang
			}
			return runCode(cmd, c, &rf, code, lang)
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&rf.lang, "lang", "l", "", "language: python, javascript (Node.js), typescript, r, java, bash, deno")
	f.StringVarP(&rf.template, "template", "t", codeInterpreterTemplate, "template of the sandbox to create")
	f.StringVarP(&rf.sandbox, "sandbox", "s", "", "run in this existing sandbox (not killed afterwards)")
	f.StringVarP(&rf.outDir, "out-dir", "o", ".", "directory for saved charts")
	f.DurationVar(&rf.timeout, "timeout", 5*time.Minute, "interrupt the code after this long (0: no limit)")
	f.BoolVar(&rf.asJSON, "json", false, "print the execution as JSON instead of streaming")
	return cmd
}

// langByExt maps file extensions to code-interpreter languages.
var langByExt = map[string]string{
	".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "typescript",
	".r": "r", ".java": "java", ".sh": "bash",
}

// readCode resolves run's argument: "-" reads in, an existing file is read
// (its extension suggesting the language), anything else is code.
func readCode(arg string, in io.Reader) (code, lang string, err error) {
	if arg == "-" {
		b, err := io.ReadAll(in)
		if err != nil {
			return "", "", fmt.Errorf("read code from stdin: %w", err)
		}
		return string(b), "", nil
	}
	if st, err := os.Stat(arg); err == nil && st.Mode().IsRegular() {
		b, err := os.ReadFile(arg)
		if err != nil {
			return "", "", fmt.Errorf("read code: %w", err)
		}
		return string(b), langByExt[strings.ToLower(filepath.Ext(arg))], nil
	}
	return arg, "", nil
}

// runCode gets a sandbox (created or connected), runs code in it and prints
// the execution; the created sandbox is killed at the end.
func runCode(cmd *cobra.Command, c *clientFlags, rf *runFlags, code, lang string) error {
	ctx := cmd.Context()
	sb, created, err := runSandbox(ctx, c, rf)
	if err != nil {
		return err
	}
	if created {
		defer func() { _ = sb.Kill(context.WithoutCancel(ctx)) }()
	} else {
		defer sb.Close()
	}
	stop := keepAlive(ctx, sb)
	defer stop()
	p := &runPrinter{out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), outDir: rf.outDir, quiet: rf.asJSON}
	timeout := rf.timeout
	if timeout == 0 {
		timeout = sdk.NoTimeout
	}
	exec, err := sb.RunCode(ctx, code, &sdk.RunCodeOptions{
		Language: lang, Timeout: timeout,
		OnStdout: p.stdout, OnStderr: p.stderr, OnResult: p.result, OnError: p.error,
	})
	if err == nil {
		err = p.err
	}
	if err != nil {
		return err
	}
	if rf.asJSON {
		if err := writeJSON(cmd.OutOrStdout(), p.json(sb.ID(), exec)); err != nil {
			return err
		}
	}
	if exec.Error != nil {
		return exitError{code: 1}
	}
	return nil
}

// runSandbox connects to --sandbox or creates one from --template.
func runSandbox(ctx context.Context, c *clientFlags, rf *runFlags) (sb *sdk.Sandbox, created bool, err error) {
	if rf.sandbox != "" {
		sb, err = c.connect(ctx, rf.sandbox)
		return sb, false, err
	}
	sb, err = sdk.Create(ctx, &sdk.CreateOptions{ConnectionOptions: c.options(), Template: rf.template, Timeout: keepAliveFor})
	return sb, err == nil, err
}

// runPrinter prints an execution as it streams: output to stdout/stderr,
// results as text, PNGs saved to files. With quiet (--json) it only collects.
type runPrinter struct {
	out, errOut io.Writer
	outDir      string
	quiet       bool

	charts  int
	results []runResultJSON
	err     error // first failure to save a chart
}

func (p *runPrinter) stdout(m sdk.OutputMessage) {
	if !p.quiet {
		_, _ = io.WriteString(p.out, m.Line)
	}
}

func (p *runPrinter) stderr(m sdk.OutputMessage) {
	if !p.quiet {
		_, _ = io.WriteString(p.errOut, m.Line)
	}
}

func (p *runPrinter) result(r sdk.Result) {
	rj := runResultJSON{
		Formats: r.Formats(), Text: r.Text, HTML: r.HTML, Markdown: r.Markdown, JSON: r.JSON,
		Data: r.Data, Chart: r.Chart, IsMainResult: r.IsMainResult,
	}
	if r.PNG != "" {
		path, err := p.savePNG(&r)
		if err != nil && p.err == nil {
			p.err = err
		}
		rj.PNGFile = path
	}
	p.results = append(p.results, rj)
	if p.quiet {
		return
	}
	switch {
	case rj.PNGFile != "":
		fmt.Fprintln(p.out, rj.PNGFile)
	case r.Text != "":
		fmt.Fprintln(p.out, r.Text)
	default:
		fmt.Fprintf(p.out, "[result: %s]\n", strings.Join(rj.Formats, ", "))
	}
}

func (p *runPrinter) error(e sdk.ExecutionError) {
	if p.quiet {
		return
	}
	tb := strings.TrimRight(e.Traceback, "\n")
	if tb == "" {
		tb = e.Name + ": " + e.Value
	}
	fmt.Fprintln(p.errOut, tb)
}

// savePNG writes the result's PNG to the next free cubby-chart-<n>.png in
// outDir (existing files are never overwritten) and returns its path.
func (p *runPrinter) savePNG(r *sdk.Result) (string, error) {
	data, err := r.PNGBytes()
	if err != nil {
		return "", fmt.Errorf("decode chart PNG: %w", err)
	}
	if err := os.MkdirAll(p.outDir, 0o755); err != nil {
		return "", fmt.Errorf("chart directory: %w", err)
	}
	for {
		p.charts++
		path := filepath.Join(p.outDir, fmt.Sprintf("cubby-chart-%d.png", p.charts))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("save chart: %w", err)
		}
		_, werr := f.Write(data)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return "", fmt.Errorf("save chart %s: %w", path, werr)
		}
		return path, nil
	}
}

// json assembles the --json result.
func (p *runPrinter) json(id string, exec *sdk.Execution) runJSON {
	out := runJSON{SandboxID: id, Stdout: exec.Logs.Stdout, Stderr: exec.Logs.Stderr, Results: p.results}
	if out.Stdout == nil {
		out.Stdout = []string{}
	}
	if out.Stderr == nil {
		out.Stderr = []string{}
	}
	if out.Results == nil {
		out.Results = []runResultJSON{}
	}
	if e := exec.Error; e != nil {
		out.Error = &runErrorJSON{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
	}
	return out
}
