package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// renewEvery throttles the timeout renewals of a session's own sandbox.
const renewEvery = time.Minute

// cleanupTimeout bounds killing a session's sandbox when the session ends.
const cleanupTimeout = 30 * time.Second

// errNoSession is returned by tools once the service is closed.
var errNoSession = errors.New("the MCP server is shutting down")

// session is the state of one MCP session: its own sandbox, the sandboxes
// it connected to, its code contexts and the commands it started.
type session struct {
	cfg  Config
	conn sdk.ConnectionOptions

	ownMu sync.Mutex // held while the own sandbox is created or renewed

	mu       sync.Mutex
	own      *sdk.Sandbox // created on first use; nil before and after it ended
	renewed  time.Time
	boxes    map[string]*sdk.Sandbox     // connected sandboxes by ID
	contexts map[string]*sdk.CodeContext // "<sandbox>/<label>"
	procs    map[string]*proc            // "<sandbox>/<pid>"
	closed   bool

	closeOnce sync.Once
}

func newSession(cfg Config, conn sdk.ConnectionOptions) *session {
	return &session{cfg: cfg, conn: conn, boxes: map[string]*sdk.Sandbox{},
		contexts: map[string]*sdk.CodeContext{}, procs: map[string]*proc{}}
}

// sandbox returns the sandbox a call acts on: the one with this ID when id is
// set (connected once per session, which resumes it when paused), else the
// session's own sandbox, created on first use. note is non-empty when the
// own sandbox had ended and a new one replaced it.
func (s *session) sandbox(ctx context.Context, id string) (sb *sdk.Sandbox, note string, err error) {
	if id != "" {
		return s.connected(ctx, id)
	}
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	s.mu.Lock()
	own, renewed, closed := s.own, s.renewed, s.closed
	s.mu.Unlock()
	if closed {
		return nil, "", errNoSession
	}
	if own != nil {
		if time.Since(renewed) < renewEvery {
			return own, "", nil
		}
		err := own.SetTimeout(ctx, s.cfg.SessionIdle)
		if err == nil {
			s.setOwn(own)
			return own, "", nil
		}
		if !errors.Is(err, sdk.ErrNotFound) {
			return nil, "", explain(err, "renew the session sandbox", own.ID())
		}
		note = fmt.Sprintf("this session's sandbox %s had ended (killed or timed out); a new one was created and earlier state is gone", own.ID())
		s.forget(own.ID())
	}
	sb, err = s.create(ctx)
	return sb, note, err
}

// create makes the session's own sandbox.
func (s *session) create(ctx context.Context) (*sdk.Sandbox, error) {
	sb, err := sdk.Create(ctx, &sdk.CreateOptions{
		ConnectionOptions: s.conn, Template: s.cfg.Template, Timeout: s.cfg.SessionIdle,
		Metadata: map[string]string{"cubby.mcp": "session"},
	})
	if err != nil {
		return nil, explain(err, "create the session sandbox from template "+s.cfg.Template, "")
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = sb.Kill(kctx)
		return nil, errNoSession
	}
	s.cfg.Log.Info("mcp session sandbox created", "sandbox", sb.ID(), "template", s.cfg.Template)
	s.setOwn(sb)
	return sb, nil
}

func (s *session) setOwn(sb *sdk.Sandbox) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.own, s.renewed = sb, time.Now()
	s.boxes[sb.ID()] = sb
}

// connected returns the session's connection to sandbox id, connecting on
// first use.
func (s *session) connected(ctx context.Context, id string) (*sdk.Sandbox, string, error) {
	s.mu.Lock()
	sb, ok := s.boxes[id]
	s.mu.Unlock()
	if ok {
		return sb, "", nil
	}
	sb, err := sdk.Connect(ctx, id, &sdk.ConnectOptions{ConnectionOptions: s.conn, Timeout: s.cfg.SessionIdle})
	if err != nil {
		return nil, "", explain(err, "connect to the sandbox", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.boxes[id]; ok {
		sb.Close()
		return prev, "", nil
	}
	s.boxes[id] = sb
	return sb, "", nil
}

// ownID is the ID of the session's own sandbox, "" when there is none.
func (s *session) ownID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own == nil {
		return ""
	}
	return s.own.ID()
}

// forget drops what the session holds of sandbox id (after it ended or was
// killed): its connection, contexts and commands.
func (s *session) forget(id string) {
	s.mu.Lock()
	sb := s.boxes[id]
	delete(s.boxes, id)
	if s.own != nil && s.own.ID() == id {
		s.own = nil
	}
	for k := range s.contexts {
		if sandboxOfKey(k) == id {
			delete(s.contexts, k)
		}
	}
	var procs []*proc
	for k, p := range s.procs {
		if sandboxOfKey(k) == id {
			procs = append(procs, p)
			delete(s.procs, k)
		}
	}
	s.mu.Unlock()
	for _, p := range procs {
		p.h.Disconnect()
	}
	if sb != nil {
		sb.Close()
	}
}

// forgetIfGone forgets sandbox id when err says it no longer exists.
func (s *session) forgetIfGone(id string, err error) {
	if errors.Is(err, sdk.ErrSandboxKilled) || isSandboxNotFound(err) {
		s.forget(id)
	}
}

// close kills the session's own sandbox and drops everything else. Callers
// after the first wait until that is done.
func (s *session) close() { s.closeOnce.Do(s.shutdown) }

func (s *session) shutdown() {
	s.mu.Lock()
	s.closed = true
	own := s.own
	ids := make([]string, 0, len(s.boxes))
	for id := range s.boxes {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.forget(id)
	}
	if own == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := own.Kill(ctx); err != nil && !errors.Is(err, sdk.ErrNotFound) {
		s.cfg.Log.Warn("kill mcp session sandbox", "sandbox", own.ID(), "err", err)
		return
	}
	s.cfg.Log.Info("mcp session ended; its sandbox was killed", "sandbox", own.ID())
}

// key builds the "<sandbox>/<name>" keys of contexts and procs.
func key(sandbox, name string) string { return sandbox + "/" + name }

func sandboxOfKey(k string) string {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i]
		}
	}
	return k
}
