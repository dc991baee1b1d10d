package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/jupyter"
	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

// Engine failures the service maps to error lines; test with errors.Is.
var (
	errEngineDied      = errors.New("kernel died")
	errEngineRestarted = errors.New("context restarted")
	errEngineClosed    = errors.New("context deleted")
	errEnvUnsupported  = errors.New("env_vars are not supported for this kernel")
)

// engine runs the cells of one context: a Jupyter kernel or a native bash.
type engine interface {
	// execute runs a user cell, writing its output lines to out. User errors
	// are written as error lines; the returned error reports why the cell could
	// not finish (ctx, death, restart, close).
	execute(ctx context.Context, code string, out *stream) error
	// syncEnv makes the kernel's environment contain env (the sandbox env),
	// setting only what differs from what it was started or last synced with.
	syncEnv(ctx context.Context, env map[string]string) error
	// pushEnv sets per-request vars remembering the previous values; popEnv
	// restores them.
	pushEnv(ctx context.Context, vars map[string]string) error
	popEnv(ctx context.Context) error
	restart(ctx context.Context) error
	close() error
}

// silentTimeout bounds the service's own silent executions (env set-up).
const silentTimeout = 30 * time.Second

// kernelEngine runs cells on a Jupyter kernel.
type kernelEngine struct {
	k        *jupyter.Kernel
	env      *envCode
	spawnEnv map[string]string // sandbox env the process was started with
	applied  map[string]string // sandbox env known to be in the kernel
	pid      int               // kernel process applied refers to
}

func (e *kernelEngine) execute(ctx context.Context, code string, out *stream) error {
	on := func(m *jupyter.Message) { forward(m, out) }
	r, err := e.k.Execute(ctx, jupyter.ExecuteRequest{Code: code, StoreHistory: true}, on)
	if r.Dropped > 0 {
		out.output(execapi.TypeStderr, fmt.Sprintf("[output truncated: %d messages dropped]\n", r.Dropped), "")
	}
	if err != nil {
		return kernelErr(err)
	}
	switch r.Status {
	case "error":
		out.kernelError(r.Ename, r.Evalue, r.Traceback)
	case "aborted":
		out.serviceError(ErrNameAborted, "Execution was aborted")
	}
	return nil
}

// kernelErr maps jupyter errors to engine errors (keeping ctx errors visible).
func kernelErr(err error) error {
	switch {
	case errors.Is(err, jupyter.ErrKernelDied), errors.Is(err, jupyter.ErrInterruptTimeout):
		return fmt.Errorf("%w: %w", errEngineDied, err)
	case errors.Is(err, jupyter.ErrRestarted):
		return fmt.Errorf("%w: %w", errEngineRestarted, err)
	case errors.Is(err, jupyter.ErrClosed):
		return fmt.Errorf("%w: %w", errEngineClosed, err)
	}
	return err
}

// oomKilled reports whether err is a kernel death by the OOM killer.
func oomKilled(err error) bool { return errors.Is(err, jupyter.ErrOutOfMemory) }

// oomDetail is "killed by the out-of-memory killer (memory limit N MiB)".
func oomDetail(err error) string {
	var oe *jupyter.OOMError
	if errors.As(err, &oe) && oe.LimitBytes > 0 {
		return fmt.Sprintf("%v (memory limit %d MiB)", jupyter.ErrOutOfMemory, oe.LimitBytes>>20)
	}
	return jupyter.ErrOutOfMemory.Error()
}

// forward maps one kernel message to stream lines (docs/wire/code-interpreter.md, "Execution").
func forward(m *jupyter.Message, out *stream) {
	switch m.Type() {
	case "execute_input":
		var c struct {
			Count int `json:"execution_count"`
		}
		if m.Decode(&c) == nil {
			out.executions(c.Count)
		}
	case "stream":
		var c struct{ Name, Text string }
		if m.Decode(&c) == nil {
			name := execapi.TypeStdout
			if c.Name == "stderr" {
				name = execapi.TypeStderr
			}
			out.output(name, c.Text, m.Header.Date)
		}
	case "execute_result", "display_data":
		var c struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if m.Decode(&c) == nil {
			out.result(c.Data, m.Type() == "execute_result")
		}
	case "error":
		var c struct {
			Ename     string   `json:"ename"`
			Evalue    string   `json:"evalue"`
			Traceback []string `json:"traceback"`
		}
		if m.Decode(&c) == nil {
			out.kernelError(c.Ename, c.Evalue, c.Traceback)
		}
	}
}

// silent runs service code without output or history.
func (e *kernelEngine) silent(ctx context.Context, code string) error {
	ctx, cancel := context.WithTimeout(ctx, silentTimeout)
	defer cancel()
	r, err := e.k.Execute(ctx, jupyter.ExecuteRequest{Code: code, Silent: true}, nil)
	if err != nil {
		return kernelErr(err)
	}
	if r.Status != "ok" {
		return fmt.Errorf("silent execution: %s: %s %s", r.Status, r.Ename, r.Evalue)
	}
	return nil
}

func (e *kernelEngine) syncEnv(ctx context.Context, env map[string]string) error {
	if pid := e.k.Pid(); pid != e.pid {
		e.pid, e.applied = pid, maps.Clone(e.spawnEnv)
	}
	diff := map[string]string{}
	for k, v := range env {
		if cur, ok := e.applied[k]; !ok || cur != v {
			diff[k] = v
		}
	}
	if len(diff) == 0 {
		return nil
	}
	if e.env == nil {
		return nil // cannot express it for this kernel; it keeps its spawn env
	}
	if err := e.silent(ctx, e.env.set(diff)); err != nil {
		return fmt.Errorf("set sandbox env: %w", err)
	}
	maps.Copy(e.applied, diff)
	return nil
}

func (e *kernelEngine) pushEnv(ctx context.Context, vars map[string]string) error {
	if e.env == nil {
		return errEnvUnsupported
	}
	if err := e.silent(ctx, e.env.save(vars)); err != nil {
		return fmt.Errorf("set env_vars: %w", err)
	}
	return nil
}

func (e *kernelEngine) popEnv(ctx context.Context) error {
	if err := e.silent(ctx, e.env.restore); err != nil {
		return fmt.Errorf("restore env_vars: %w", err)
	}
	return nil
}

func (e *kernelEngine) restart(ctx context.Context) error { return e.k.Restart(ctx) }

func (e *kernelEngine) close() error { return e.k.Close() }
