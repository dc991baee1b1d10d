package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cubby-dev/cubby/sdk"
)

// Limits of the lifecycle tools, seconds and entries.
const (
	defaultSandboxSeconds = 300
	maxSandboxSeconds     = 24 * 3600
	maxListedSandboxes    = 100
)

// sandboxArg is the argument naming the sandbox a tool acts on (embedded in
// the arguments of the tools that take more).
type sandboxArg struct {
	Sandbox string `json:"sandbox,omitempty" jsonschema:"ID of the sandbox. Default: this session's own sandbox."`
}

type sandboxCreateArgs struct {
	Template            string            `json:"template,omitempty" jsonschema:"Template name or ID (template_list shows them). Default: the session template (code-interpreter unless configured)."`
	TimeoutSeconds      int               `json:"timeout_seconds,omitempty" jsonschema:"Seconds until the sandbox is killed (default 300, at most 86400); sandbox_set_timeout changes it."`
	Metadata            map[string]string `json:"metadata,omitempty" jsonschema:"Key/value labels, usable as sandbox_list filters."`
	Envs                map[string]string `json:"envs,omitempty" jsonschema:"Environment variables of every process in the sandbox."`
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty" jsonschema:"false cuts the sandbox off the internet (default: allowed)."`
}

type sandboxListArgs struct {
	State    string            `json:"state,omitempty" jsonschema:"running, paused, or empty for both."`
	Template string            `json:"template,omitempty" jsonschema:"Only sandboxes of this template."`
	Metadata map[string]string `json:"metadata,omitempty" jsonschema:"Only sandboxes whose metadata has all these pairs."`
}

type sandboxTimeoutArgs struct {
	sandboxArg
	TimeoutSeconds int `json:"timeout_seconds" jsonschema:"The sandbox is killed this many seconds from now (1 to 86400); it may shorten its life."`
}

type sandboxResumeArgs struct {
	sandboxArg
	TimeoutSeconds int `json:"timeout_seconds,omitempty" jsonschema:"Keep it alive at least this many seconds from now (default 300)."`
}

type getURLArgs struct {
	Port int `json:"port" jsonschema:"TCP port a server listens on inside the sandbox (1-65535)."`
	sandboxArg
}

type sandboxInfo struct {
	Sandbox    string            `json:"sandbox"`
	Template   string            `json:"template"`
	Alias      string            `json:"alias,omitempty"`
	State      string            `json:"state" jsonschema:"running or paused"`
	StartedAt  time.Time         `json:"started_at"`
	EndAt      time.Time         `json:"end_at" jsonschema:"When it will be killed (or paused) unless its timeout changes."`
	CPUCount   int               `json:"cpu_count"`
	MemoryMB   int               `json:"memory_mb"`
	DiskSizeMB int               `json:"disk_size_mb"`
	Metadata   map[string]string `json:"metadata"`
	Session    bool              `json:"session_sandbox,omitempty" jsonschema:"This is the session's own sandbox (killed when the session ends)."`
}

type sandboxListResult struct {
	Sandboxes []sandboxInfo `json:"sandboxes"`
	Truncated bool          `json:"truncated" jsonschema:"More than 100 matched; narrow the filters."`
}

type lifecycleResult struct {
	Sandbox string `json:"sandbox"`
	Done    bool   `json:"done" jsonschema:"false when there was nothing to do (e.g. already paused)."`
	Message string `json:"message"`
}

type urlResult struct {
	Sandbox string            `json:"sandbox"`
	Port    int               `json:"port"`
	URL     string            `json:"url" jsonschema:"Where to send requests."`
	Headers map[string]string `json:"headers,omitempty" jsonschema:"Headers every request to url must carry."`
	Note    string            `json:"note,omitempty"`
}

type templateListResult struct {
	Templates []templateInfo `json:"templates"`
}

type templateInfo struct {
	Template  string    `json:"template"`
	Aliases   []string  `json:"aliases"`
	BuildID   string    `json:"build_id"`
	Status    string    `json:"status"`
	BuiltAt   time.Time `json:"built_at"`
	SizeBytes int64     `json:"size_bytes,omitempty"`
}

func (t *tools) registerSandboxes(srv *mcp.Server) {
	add := func(name, title, desc string, ann *mcp.ToolAnnotations) *mcp.Tool {
		return &mcp.Tool{Name: name, Title: title, Description: desc, Annotations: ann}
	}
	ro, destructive := &mcp.ToolAnnotations{ReadOnlyHint: true}, &mcp.ToolAnnotations{DestructiveHint: new(true)}
	mcp.AddTool(srv, add("sandbox_create", "Create a sandbox", "Create a new sandbox from a template. It is not tied to this session: it lives until its timeout or sandbox_kill. Pass its ID as \"sandbox\" to the other tools.", nil), t.sandboxCreate)
	mcp.AddTool(srv, add("sandbox_list", "List sandboxes", "List the running and paused sandboxes this API key can see, newest first.", ro), t.sandboxList)
	mcp.AddTool(srv, add("sandbox_info", "Describe a sandbox", "Show a sandbox's template, state, deadline, resources and metadata.", ro), t.sandboxInfo)
	mcp.AddTool(srv, add("sandbox_kill", "Kill a sandbox", "Kill a sandbox: its processes and files are gone.", destructive), t.sandboxKill)
	mcp.AddTool(srv, add("sandbox_set_timeout", "Set a sandbox's timeout", "Set when a sandbox is killed: timeout_seconds from now.", nil), t.sandboxSetTimeout)
	mcp.AddTool(srv, add("sandbox_pause", "Pause a sandbox", "Pause a running sandbox (processes frozen, files kept); sandbox_resume or any tool call on it resumes it.", nil), t.sandboxPause)
	mcp.AddTool(srv, add("sandbox_resume", "Resume a sandbox", "Resume a paused sandbox (a running one just has its deadline extended).", nil), t.sandboxResume)
	mcp.AddTool(srv, add("get_url", "Get a port's URL", "Return the URL (and required headers) at which a server listening on a port inside the sandbox is reachable.", ro), t.getURL)
	mcp.AddTool(srv, add("template_list", "List templates", "List the templates sandboxes can be created from.", ro), t.templateList)
}

func (t *tools) sandboxCreate(ctx context.Context, req *mcp.CallToolRequest, in sandboxCreateArgs) (*mcp.CallToolResult, sandboxInfo, error) {
	timeout, err := seconds("timeout_seconds", in.TimeoutSeconds, defaultSandboxSeconds, maxSandboxSeconds)
	if err != nil {
		return nil, sandboxInfo{}, err
	}
	tpl := in.Template
	if tpl == "" {
		tpl = t.svc.cfg.Template
	}
	sb, err := sdk.Create(ctx, &sdk.CreateOptions{ConnectionOptions: t.conn, Template: tpl, Timeout: timeout,
		Metadata: in.Metadata, Envs: in.Envs, AllowInternetAccess: in.AllowInternetAccess})
	if err != nil {
		return nil, sandboxInfo{}, explain(err, "sandbox_create", "")
	}
	defer sb.Close()
	info, err := sb.GetInfo(ctx)
	if err != nil {
		return nil, sandboxInfo{}, explain(err, "sandbox_create", sb.ID())
	}
	return nil, infoOut(*info, ""), nil
}

func infoOut(i sdk.SandboxInfo, own string) sandboxInfo {
	return sandboxInfo{Sandbox: i.SandboxID, Template: i.TemplateID, Alias: i.Name, State: string(i.State),
		StartedAt: i.StartedAt, EndAt: i.EndAt, CPUCount: i.CPUCount, MemoryMB: i.MemoryMB, DiskSizeMB: i.DiskSizeMB,
		Metadata: i.Metadata, Session: own != "" && i.SandboxID == own}
}

func (t *tools) sandboxList(ctx context.Context, req *mcp.CallToolRequest, in sandboxListArgs) (*mcp.CallToolResult, sandboxListResult, error) {
	opts := &sdk.ListOptions{ConnectionOptions: t.conn, Template: in.Template, Metadata: in.Metadata, Limit: maxListedSandboxes}
	switch in.State {
	case "":
	case "running", "paused":
		opts.State = []sdk.SandboxState{sdk.SandboxState(in.State)}
	default:
		return nil, sandboxListResult{}, fmt.Errorf("state %q: want running, paused or empty", in.State)
	}
	st, err := t.state(req)
	if err != nil {
		return nil, sandboxListResult{}, err
	}
	p := sdk.NewSandboxPaginator(opts)
	items, err := p.NextItems(ctx)
	if err != nil {
		return nil, sandboxListResult{}, explain(err, "sandbox_list", "")
	}
	out := sandboxListResult{Sandboxes: []sandboxInfo{}, Truncated: p.HasNext()}
	own := st.ownID()
	for _, i := range items {
		out.Sandboxes = append(out.Sandboxes, infoOut(i, own))
	}
	return nil, out, nil
}

// resolve returns the sandbox ID a lifecycle call names: the argument, else
// the session's own sandbox (an error when it has none yet).
func (t *tools) resolve(req *mcp.CallToolRequest, id string) (*session, string, error) {
	st, err := t.state(req)
	if err != nil {
		return nil, "", err
	}
	if id != "" {
		return st, id, nil
	}
	if own := st.ownID(); own != "" {
		return st, own, nil
	}
	return nil, "", errors.New("no sandbox given and this session has none yet (it is created by the first run_code, run_command or file call)")
}

func (t *tools) sandboxInfo(ctx context.Context, req *mcp.CallToolRequest, in sandboxArg) (*mcp.CallToolResult, sandboxInfo, error) {
	st, id, err := t.resolve(req, in.Sandbox)
	if err != nil {
		return nil, sandboxInfo{}, err
	}
	info, err := sdk.GetInfo(ctx, id, &t.conn)
	if err != nil {
		return nil, sandboxInfo{}, st.fail("sandbox_info", id, err)
	}
	return nil, infoOut(*info, st.ownID()), nil
}

func (t *tools) sandboxKill(ctx context.Context, req *mcp.CallToolRequest, in sandboxArg) (*mcp.CallToolResult, lifecycleResult, error) {
	st, id, err := t.resolve(req, in.Sandbox)
	if err != nil {
		return nil, lifecycleResult{}, err
	}
	if err := sdk.Kill(ctx, id, &t.conn); err != nil {
		return nil, lifecycleResult{}, st.fail("sandbox_kill", id, err)
	}
	st.forget(id)
	return nil, lifecycleResult{Sandbox: id, Done: true, Message: "killed"}, nil
}

func (t *tools) sandboxSetTimeout(ctx context.Context, req *mcp.CallToolRequest, in sandboxTimeoutArgs) (*mcp.CallToolResult, lifecycleResult, error) {
	if err := within("timeout_seconds", in.TimeoutSeconds, 1, maxSandboxSeconds); err != nil {
		return nil, lifecycleResult{}, err
	}
	st, id, err := t.resolve(req, in.Sandbox)
	if err != nil {
		return nil, lifecycleResult{}, err
	}
	d := time.Duration(in.TimeoutSeconds) * time.Second
	if err := sdk.SetTimeout(ctx, id, d, &t.conn); err != nil {
		return nil, lifecycleResult{}, st.fail("sandbox_set_timeout", id, err)
	}
	return nil, lifecycleResult{Sandbox: id, Done: true,
		Message: "it will be killed at " + time.Now().Add(d).UTC().Format(time.RFC3339)}, nil
}

func (t *tools) sandboxPause(ctx context.Context, req *mcp.CallToolRequest, in sandboxArg) (*mcp.CallToolResult, lifecycleResult, error) {
	st, id, err := t.resolve(req, in.Sandbox)
	if err != nil {
		return nil, lifecycleResult{}, err
	}
	paused, err := sdk.Pause(ctx, id, nil, &t.conn)
	if err != nil {
		return nil, lifecycleResult{}, st.fail("sandbox_pause", id, err)
	}
	if !paused {
		return nil, lifecycleResult{Sandbox: id, Message: "it was already paused"}, nil
	}
	return nil, lifecycleResult{Sandbox: id, Done: true, Message: "paused"}, nil
}

func (t *tools) sandboxResume(ctx context.Context, req *mcp.CallToolRequest, in sandboxResumeArgs) (*mcp.CallToolResult, lifecycleResult, error) {
	timeout, err := seconds("timeout_seconds", in.TimeoutSeconds, defaultSandboxSeconds, maxSandboxSeconds)
	if err != nil {
		return nil, lifecycleResult{}, err
	}
	st, id, err := t.resolve(req, in.Sandbox)
	if err != nil {
		return nil, lifecycleResult{}, err
	}
	info, err := sdk.GetInfo(ctx, id, &t.conn)
	if err != nil {
		return nil, lifecycleResult{}, st.fail("sandbox_resume", id, err)
	}
	sb, err := sdk.Connect(ctx, id, &sdk.ConnectOptions{ConnectionOptions: t.conn, Timeout: timeout})
	if err != nil {
		return nil, lifecycleResult{}, st.fail("sandbox_resume", id, err)
	}
	sb.Close()
	if info.State != sdk.StatePaused {
		return nil, lifecycleResult{Sandbox: id, Message: "it was running; its deadline is now at least " + timeout.String() + " away"}, nil
	}
	return nil, lifecycleResult{Sandbox: id, Done: true, Message: "resumed"}, nil
}

func (t *tools) getURL(ctx context.Context, req *mcp.CallToolRequest, in getURLArgs) (*mcp.CallToolResult, urlResult, error) {
	if err := within("port", in.Port, 1, 65535); err != nil {
		return nil, urlResult{}, err
	}
	st, sb, _, err := t.target(ctx, req, in.Sandbox)
	if err != nil {
		return nil, urlResult{}, err
	}
	info, err := sb.GetInfo(ctx)
	if err != nil {
		return nil, urlResult{}, st.fail("get_url", sb.ID(), err)
	}
	out := urlResult{Sandbox: sb.ID(), Port: in.Port}
	if tok := sb.TrafficAccessToken(); tok != "" {
		out.Headers = map[string]string{"E2B-Traffic-Access-Token": tok}
	}
	domain := firstSet(info.SandboxDomain, t.conn.Domain, os.Getenv("E2B_DOMAIN"))
	if domain == "" && t.conn.SandboxURL != "" {
		// No host routing: the gateway routes by headers on the sandbox URL.
		if out.Headers == nil {
			out.Headers = map[string]string{}
		}
		out.Headers["E2b-Sandbox-Id"], out.Headers["E2b-Sandbox-Port"] = sb.ID(), strconv.Itoa(in.Port)
		out.URL = t.conn.SandboxURL
		out.Note = "this server has no sandbox domain (cubby serve --domain): send requests to url with these headers"
		return nil, out, nil
	}
	out.URL = scheme(t.conn.APIURL) + "://" + sb.GetHost(in.Port)
	return nil, out, nil
}

// scheme is the scheme sandbox URLs use: the API URL's when it is http,
// else https.
func scheme(apiURL string) string {
	if u, err := url.Parse(apiURL); err == nil && u.Scheme == "http" {
		return "http"
	}
	return "https"
}

func firstSet(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

func (t *tools) templateList(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, templateListResult, error) {
	list, err := sdk.ListTemplates(ctx, &t.conn)
	if err != nil {
		return nil, templateListResult{}, explain(err, "template_list", "")
	}
	out := templateListResult{Templates: []templateInfo{}}
	for _, tp := range list {
		name := tp.TemplateID
		if len(tp.Aliases) > 0 {
			name = tp.Aliases[0]
		}
		out.Templates = append(out.Templates, templateInfo{Template: name, Aliases: tp.Aliases, BuildID: tp.BuildID,
			Status: tp.BuildStatus, BuiltAt: tp.CreatedAt, SizeBytes: tp.SizeBytes})
	}
	return nil, out, nil
}
