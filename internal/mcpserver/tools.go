package mcpserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cubby-dev/cubby/sdk"
)

// tools are the MCP tools of one server, acting with conn.
type tools struct {
	svc  *Service
	conn sdk.ConnectionOptions
}

// register adds every tool to srv.
func (t *tools) register(srv *mcp.Server) {
	t.registerCode(srv)
	t.registerCommands(srv)
	t.registerFiles(srv)
	t.registerSandboxes(srv)
}

// state returns the session state of the call's session.
func (t *tools) state(req *mcp.CallToolRequest) (*session, error) {
	if st := t.svc.session(req.Session, t.conn); st != nil {
		return st, nil
	}
	return nil, errNoSession
}

// target resolves the sandbox a call acts on (see session.sandbox).
func (t *tools) target(ctx context.Context, req *mcp.CallToolRequest, id string) (*session, *sdk.Sandbox, string, error) {
	st, err := t.state(req)
	if err != nil {
		return nil, nil, "", err
	}
	sb, note, err := st.sandbox(ctx, id)
	if err != nil {
		return nil, nil, "", err
	}
	return st, sb, note, nil
}

// fail forgets sandbox id when err says it is gone and explains err.
func (s *session) fail(op, id string, err error) error {
	s.forgetIfGone(id, err)
	return explain(err, op, id)
}

// seconds validates a seconds argument: 0 means def; otherwise 1..max.
func seconds(name string, v, def, max int) (time.Duration, error) {
	n, err := orWithin(name, v, def, 1, max)
	return time.Duration(n) * time.Second, err
}

// orWithin validates an optional integer argument: 0 means def; otherwise
// it must be within lo..hi.
func orWithin(name string, v, def, lo, hi int) (int, error) {
	if v == 0 {
		return def, nil
	}
	return v, within(name, v, lo, hi)
}

// within checks that integer argument name is within lo..hi; the error
// names the argument, the range and the value given.
func within(name string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%s must be between %d and %d (got %d)", name, lo, hi, v)
	}
	return nil
}

// progress sends notifications/progress for a call that asked for them
// (its _meta.progressToken), at most one per progressEvery with the text
// gathered since the last one. A call without a token gets none.
type progress struct {
	req   *mcp.CallToolRequest
	token any

	mu      sync.Mutex
	n       int
	pending string
	last    time.Time
}

// progressEvery is the minimum interval between progress notifications.
const progressEvery = 200 * time.Millisecond

// progressMessageLimit caps the text of one notification (bytes).
const progressMessageLimit = 4096

func newProgress(req *mcp.CallToolRequest) *progress {
	return &progress{req: req, token: req.Params.GetProgressToken()}
}

// Report queues text and sends it when the interval has passed.
func (p *progress) Report(ctx context.Context, text string) {
	if p == nil || p.token == nil {
		return
	}
	p.mu.Lock()
	p.pending += text
	if time.Since(p.last) < progressEvery {
		p.mu.Unlock()
		return
	}
	p.flushLocked(ctx)
	p.mu.Unlock()
}

// Flush sends what is pending.
func (p *progress) Flush(ctx context.Context) {
	if p == nil || p.token == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending != "" {
		p.flushLocked(ctx)
	}
}

func (p *progress) flushLocked(ctx context.Context) {
	msg, _ := clipText(p.pending, progressMessageLimit)
	p.pending, p.last = "", time.Now()
	p.n++
	_ = p.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
		ProgressToken: p.token, Progress: float64(p.n), Message: msg,
	})
}
