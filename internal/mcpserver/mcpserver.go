// Package mcpserver offers Cubby to agents as Model Context Protocol tools
// (https://modelcontextprotocol.io/specification/2025-11-25), built on the
// official MCP Go SDK: run_code, run_command (with command_output and
// command_kill), file_read/file_write/file_list, the sandbox lifecycle
// (sandbox_create, sandbox_list, sandbox_info, sandbox_kill,
// sandbox_set_timeout, sandbox_pause, sandbox_resume), get_url and
// template_list.
//
// The tools are a client of the public wire protocol only (package sdk), so
// they work against any Cubby or E2B endpoint and every call is checked and
// scoped by the API key like any SDK call. `cubby mcp` serves them over stdio
// (Service.Server + mcp.StdioTransport); `cubby serve` serves them over
// streamable HTTP at /mcp (Service.Handler).
//
// Each MCP session owns at most one sandbox, created from Config.Template on
// the first call that needs one and killed when the session ends (the client
// disconnects, or an HTTP session stays idle for Config.SessionIdle); tools
// given an explicit sandbox ID use that one instead.
package mcpserver

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cubby-dev/cubby/sdk"
)

// Defaults of Config.
const (
	// DefaultTemplate is the template of session sandboxes: run_code needs a
	// code interpreter.
	DefaultTemplate = "code-interpreter"
	// DefaultSessionIdle is how long a session's sandbox lives without a call
	// (its timeout, renewed by each call) and how long an idle HTTP session is
	// kept.
	DefaultSessionIdle = 15 * time.Minute
	// DefaultOutputLimit caps each stream (stdout, stderr, a result's text)
	// in one tool result, in bytes.
	DefaultOutputLimit = 64 << 10
	// DefaultReadLimit caps file_read, in bytes.
	DefaultReadLimit = 1 << 20
)

// sessionProtocols are the MCP protocol versions served: those with
// sessions (from 2026-07-28 on the protocol is sessionless, which a sandbox
// per session cannot follow).
var sessionProtocols = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// Config configures the MCP tools.
type Config struct {
	// Connection says where the Cubby (or E2B) API is; its APIKey is the one
	// of stdio sessions (HTTP sessions use the key of their request). Set its
	// HTTPClient to share connections between sessions.
	Connection sdk.ConnectionOptions
	// Template of the session sandbox; default DefaultTemplate.
	Template string
	// SessionIdle is the idle lifetime of a session's sandbox and of an HTTP
	// session; default DefaultSessionIdle.
	SessionIdle time.Duration
	// OutputLimit and ReadLimit cap tool output (bytes); defaults
	// DefaultOutputLimit and DefaultReadLimit.
	OutputLimit int
	ReadLimit   int
	// Version is reported to clients as the server version.
	Version string
	// Log receives operational logs (never keys or tokens); nil discards.
	Log *slog.Logger
}

func (c *Config) defaults() {
	if c.Template == "" {
		c.Template = DefaultTemplate
	}
	if c.SessionIdle <= 0 {
		c.SessionIdle = DefaultSessionIdle
	}
	if c.OutputLimit <= 0 {
		c.OutputLimit = DefaultOutputLimit
	}
	if c.ReadLimit <= 0 {
		c.ReadLimit = DefaultReadLimit
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Service holds the sessions of every MCP server it made. Safe for
// concurrent use.
type Service struct {
	cfg Config

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
	closed   bool
	servers  map[string]*mcp.Server // by API key hash (Handler)
}

// New returns a Service with cfg's defaults filled in.
func New(cfg Config) *Service {
	cfg.defaults()
	return &Service{cfg: cfg, sessions: map[*mcp.ServerSession]*session{}, servers: map[string]*mcp.Server{}}
}

// Server returns an MCP server with every tool, acting with conn (its API
// key and endpoints). Each session connected to it gets its own state.
func (s *Service) Server(conn sdk.ConnectionOptions) *mcp.Server {
	if conn.HTTPClient == nil {
		conn.HTTPClient = s.cfg.Connection.HTTPClient
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "cubby", Title: "Cubby sandboxes", Version: s.cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       s.cfg.Log,
		// Tools only: no logging capability (the server sends no log notifications).
		Capabilities:              &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		SupportedProtocolVersions: sessionProtocols,
	})
	t := &tools{svc: s, conn: conn}
	t.register(srv)
	return srv
}

// instructions tell clients how the tools fit together.
const instructions = `Cubby runs code in isolated Linux sandboxes (Debian; Python with numpy/pandas/matplotlib in the code-interpreter template).
Without a "sandbox" argument, tools use this session's own sandbox: created on first use, state (variables, files, processes) kept across calls, killed when the session ends.
run_code keeps interpreter state per language (and per "context" label). run_command returns a pid for commands still running after wait_seconds; poll them with command_output and stop them with command_kill.
Pass "sandbox" to act on another sandbox (sandbox_create makes one that outlives the session until its timeout).`

// session returns the state of ss, creating it (and arranging its cleanup
// when ss ends) on first use. It returns nil once the Service is closed.
func (s *Service) session(ss *mcp.ServerSession, conn sdk.ConnectionOptions) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if st, ok := s.sessions[ss]; ok {
		return st
	}
	st := newSession(s.cfg, conn)
	s.sessions[ss] = st
	go func() {
		_ = ss.Wait()
		st.close() // before leaving the map, so Close waits for it
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
	}()
	return st
}

// Close ends every session's state: their sandboxes are killed and their
// command streams closed. It waits until that is done (also for sessions
// whose client left just before) or ctx ends.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	open := make([]*session, 0, len(s.sessions))
	for _, st := range s.sessions {
		open = append(open, st)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, st := range open {
		wg.Add(1)
		go func() { defer wg.Done(); st.close() }()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
