package jupyter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ExecuteRequest is the content of an execute_request (messaging v5.3). The client
// always sends allow_stdin=false (input() fails fast in the cell instead of
// hanging) and stop_on_error=false (executions are serialised by the client, so
// the kernel's abort window after an error must not swallow the next request).
type ExecuteRequest struct {
	Code string
	// Silent: no execute_input/execute_result, the execution count is not bumped.
	Silent bool
	// StoreHistory adds the cell to the kernel's history (forced off when Silent).
	StoreHistory bool
	// UserExpressions are evaluated after the cell; results come back in
	// Reply.UserExpressions under the same names.
	UserExpressions map[string]string
}

// Reply summarises an execution: the execute_reply fields plus completion facts.
type Reply struct {
	// Status is "ok", "error" or "aborted" (IRkernel's "abort" is normalised).
	Status         string
	ExecutionCount int
	// Ename, Evalue and Traceback are set when Status is "error".
	Ename     string
	Evalue    string
	Traceback []string
	// UserExpressions holds the raw user_expressions results of the reply.
	UserExpressions map[string]json.RawMessage
	// Incomplete: status idle never arrived within Options.IdleGrace after the
	// reply, so late output may be missing.
	Incomplete bool
	// Dropped counts output messages discarded over Options.MaxPendingBytes.
	Dropped int
}

type executeReplyContent struct {
	Status          string                     `json:"status"`
	ExecutionCount  int                        `json:"execution_count"`
	Ename           string                     `json:"ename"`
	Evalue          string                     `json:"evalue"`
	Traceback       []string                   `json:"traceback"`
	UserExpressions map[string]json.RawMessage `json:"user_expressions"`
}

type executeRequestContent struct {
	Code            string            `json:"code"`
	Silent          bool              `json:"silent"`
	StoreHistory    bool              `json:"store_history"`
	UserExpressions map[string]string `json:"user_expressions"`
	AllowStdin      bool              `json:"allow_stdin"`
	StopOnError     bool              `json:"stop_on_error"`
}

// Execute runs req and calls on, from the calling goroutine and in arrival order,
// for every message that belongs to the execution (iopub status/execute_input/
// stream/display_data/update_display_data/clear_output/execute_result/error and
// the shell execute_reply). It returns when both execute_reply and status idle
// arrived. A slow on never blocks the socket readers.
//
// When ctx ends the kernel is interrupted and Execute keeps delivering messages
// until the execution ends; it then returns the reply and ctx's error. If the
// execution does not end within Options.InterruptGrace the kernel is killed and
// the error wraps ErrInterruptTimeout. If the process exits, the error wraps
// ErrKernelDied (detected within milliseconds of the exit); ErrRestarted and
// ErrClosed report a concurrent Restart or Shutdown. With Options.OOM set, a
// death by SIGKILL while the cgroup's OOM-kill counter rose is an *OOMError
// (also ErrKernelDied and ErrOutOfMemory). A kernel found dead is
// started again before running req.
func (k *Kernel) Execute(ctx context.Context, req ExecuteRequest, on func(*Message)) (Reply, error) {
	k.execMu.Lock()
	defer k.execMu.Unlock()
	in, err := k.instanceForExec(ctx)
	if err != nil {
		return Reply{}, err
	}
	h := in.header("execute_request")
	q := newQueue(k.opts.MaxPendingBytes)
	in.router.register(h.MsgID, q)
	defer in.router.unregister(h.MsgID)
	if req.UserExpressions == nil {
		req.UserExpressions = map[string]string{}
	}
	oom := startOOMWatch(k.opts.OOM)
	err = in.sendHeader(in.shell, h, executeRequestContent{Code: req.Code, Silent: req.Silent,
		StoreHistory: req.StoreHistory && !req.Silent, UserExpressions: req.UserExpressions})
	if err != nil {
		return Reply{}, err
	}
	x := &execution{k: k, in: in, q: q, on: on, oom: oom}
	return x.wait(ctx)
}

// execution tracks one request until reply+idle.
type execution struct {
	k         *Kernel
	in        *instance
	q         *queue
	on        func(*Message)
	reply     Reply
	gotReply  bool
	gotIdle   bool
	cancelErr error
	oom       *oomWatch // nil = no OOM detection
}

func (x *execution) deliver() error {
	for _, m := range x.q.drain() {
		switch {
		case m.Channel == "shell" && m.Type() == "execute_reply":
			var c executeReplyContent
			if err := m.Decode(&c); err != nil {
				return err
			}
			if c.Status == "abort" {
				c.Status = "aborted"
			}
			x.reply = Reply{Status: c.Status, ExecutionCount: c.ExecutionCount, Ename: c.Ename,
				Evalue: c.Evalue, Traceback: c.Traceback, UserExpressions: c.UserExpressions}
			x.gotReply = true
		case m.Channel == "iopub" && m.Type() == "status":
			var c struct {
				State string `json:"execution_state"`
			}
			if m.Decode(&c) == nil && c.State == "idle" {
				x.gotIdle = true
			}
		}
		if x.on != nil {
			x.on(m)
		}
	}
	return nil
}

func (x *execution) finish(err error) (Reply, error) {
	x.reply.Dropped = x.q.droppedCount()
	if err == nil {
		err = x.cancelErr
	}
	return x.reply, err
}

func (x *execution) wait(ctx context.Context) (Reply, error) {
	var graceC, idleC, resendC, settleC <-chan time.Time
	settled := false
	ctxDone := ctx.Done()
	for {
		if err := x.deliver(); err != nil {
			return x.finish(err)
		}
		if x.gotReply && x.gotIdle {
			if x.k.opts.SettleDelay <= 0 || settled {
				return x.finish(nil)
			}
			if settleC == nil {
				t := time.NewTimer(x.k.opts.SettleDelay)
				defer t.Stop()
				settleC = t.C
			}
		}
		if x.gotReply && !x.gotIdle && idleC == nil {
			t := time.NewTimer(x.k.opts.IdleGrace)
			defer t.Stop()
			idleC = t.C
		}
		select {
		case <-x.q.notify:
		case <-ctxDone:
			ctxDone, x.cancelErr = nil, ctx.Err()
			if err := x.in.interrupt(x.k.spec.InterruptMode); err != nil {
				x.k.log.Warn("interrupt failed", "err", err)
			}
			t := time.NewTimer(x.k.opts.InterruptGrace)
			defer t.Stop()
			graceC = t.C
			// A signal that lands before the user code runs can be swallowed by the
			// kernel's own machinery; repeat it until the execution reacts.
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			resendC = tick.C
		case <-resendC:
			if !x.gotReply {
				x.in.interrupt(x.k.spec.InterruptMode)
			}
		case <-graceC:
			x.in.stop(ErrInterruptTimeout)
			return x.finish(fmt.Errorf("%w: %w", ErrInterruptTimeout, x.cancelErr))
		case <-settleC:
			settled = true
		case <-idleC:
			x.reply.Incomplete = true
			return x.finish(nil)
		case <-x.in.dead:
			x.deliver()
			err := x.oom.explain(x.in.stopErr(), x.in.signal())
			if x.cancelErr != nil && !errors.Is(err, ErrKernelDied) {
				err = fmt.Errorf("%w: %w", err, x.cancelErr)
			}
			return x.finish(err)
		}
	}
}
