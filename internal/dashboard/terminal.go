package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/cubby-dev/cubby/sdk"
)

// Terminal size bounds (character cells) and limits.
const (
	minCols, maxCols = 10, 500
	minRows, maxRows = 4, 200
	maxTermMessage   = 64 << 10 // one message from the browser
	termKillTimeout  = 5 * time.Second
)

// termMessage is a message from the browser: {"type":"input","data":"…"} or
// {"type":"resize","cols":N,"rows":N}.
type termMessage struct {
	Type string `json:"type"`
	Data string `json:"data"`
	Cols int    `json:"cols"`
	Rows int    `json:"rows"`
}

// terminal bridges a WebSocket to a new PTY (a login shell) in the sandbox.
// The browser sends termMessages (text); the terminal's output comes back as
// binary messages. When the shell ends, or the sandbox is killed, a text
// message {"type":"exit","message":…} says so and the socket closes; when the
// browser leaves, the shell is killed. The handshake must come from the
// dashboard's own origin (cross-site WebSocket hijacking is refused).
func (d *Dashboard) terminal(w http.ResponseWriter, r *http.Request, sess *session) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return // Accept answered the handshake with an error
	}
	c.SetReadLimit(maxTermMessage)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	bye := func(msg string) {
		b, _ := json.Marshal(map[string]string{"type": "exit", "message": msg})
		_ = c.Write(ctx, websocket.MessageText, b)
		_ = c.Close(websocket.StatusNormalClosure, "")
	}
	sb, err := d.running(ctx, sess, r.PathValue("id"))
	if err != nil {
		bye("Cannot open a terminal: " + errorText(err))
		return
	}
	defer sb.Close()
	out := make(chan []byte, 256)
	size := sdk.PtySize{Cols: uint32(bounded(r.URL.Query().Get("cols"), 80, minCols, maxCols)),
		Rows: uint32(bounded(r.URL.Query().Get("rows"), 24, minRows, maxRows))}
	h, err := sb.Pty.Create(ctx, size, func(b []byte) {
		select {
		case out <- append([]byte(nil), b...):
		case <-ctx.Done():
		}
	}, &sdk.PtyOptions{Timeout: sdk.NoTimeout})
	if err != nil {
		bye("Cannot open a terminal: " + errorText(err))
		return
	}
	ended := make(chan string, 1)
	go func() { ended <- shellEnd(h) }()
	left := make(chan struct{})
	go func() { defer close(left); d.termInput(ctx, c, sb, h.PID()) }()
	for {
		select {
		case b := <-out:
			if err := c.Write(ctx, websocket.MessageBinary, b); err != nil {
				killShell(ctx, h)
				return
			}
		case msg := <-ended:
			drain(ctx, c, out)
			bye(msg)
			return
		case <-left:
			killShell(ctx, h)
			return
		}
	}
}

// termInput forwards the browser's keystrokes and resizes until it leaves.
func (d *Dashboard) termInput(ctx context.Context, c *websocket.Conn, sb *sdk.Sandbox, pid uint32) {
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return
		}
		var m termMessage
		if typ != websocket.MessageText || json.Unmarshal(b, &m) != nil {
			continue
		}
		switch m.Type {
		case "input":
			err = sb.Pty.SendInput(ctx, pid, []byte(m.Data))
		case "resize":
			err = sb.Pty.Resize(ctx, pid, sdk.PtySize{Cols: uint32(clamp(m.Cols, minCols, maxCols)), Rows: uint32(clamp(m.Rows, minRows, maxRows))})
		}
		if err != nil {
			d.cfg.Log.Debug("terminal input", "err", err)
		}
	}
}

// shellEnd waits for the shell and says how it ended.
func shellEnd(h *sdk.CommandHandle) string {
	res, err := h.Wait(context.Background())
	var exit *sdk.CommandExitError
	var nf *sdk.NotFoundError
	switch {
	case errors.Is(err, sdk.ErrSandboxKilled) || errors.As(err, &nf) && nf.Resource == sdk.ResourceSandbox:
		return "The sandbox was killed or paused: this terminal is closed."
	case errors.As(err, &exit):
		return fmt.Sprintf("The shell exited with status %d.", exit.ExitCode)
	case err != nil:
		return "The terminal ended: " + errorText(err)
	case res != nil:
		return fmt.Sprintf("The shell exited with status %d.", res.ExitCode)
	}
	return "The terminal ended."
}

// drain sends output still queued when the shell ended.
func drain(ctx context.Context, c *websocket.Conn, out chan []byte) {
	for {
		select {
		case b := <-out:
			if c.Write(ctx, websocket.MessageBinary, b) != nil {
				return
			}
		default:
			return
		}
	}
}

func killShell(ctx context.Context, h *sdk.CommandHandle) {
	kctx, cancel := context.WithTimeout(ctx, termKillTimeout)
	defer cancel()
	_ = h.Kill(kctx)
	h.Disconnect()
}

// bounded parses s as an int within [lo, hi], def when absent or invalid.
func bounded(s string, def, lo, hi int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return clamp(n, lo, hi)
}

func clamp(n, lo, hi int) int { return min(max(n, lo), hi) }
