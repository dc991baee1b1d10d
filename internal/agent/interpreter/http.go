package interpreter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
)

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return strings.TrimSpace(*s)
}

// Handler returns the service's HTTP API: POST /execute, GET and POST /contexts,
// POST /contexts/{id}/restart, DELETE /contexts/{id} and GET /health. The
// /contexts routes answer once the default contexts exist (DefaultsCreated).
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+execapi.PathExecute, s.handleExecute)
	mux.HandleFunc("GET "+execapi.PathContexts, s.afterDefaults(s.handleList))
	mux.HandleFunc("POST "+execapi.PathContexts, s.afterDefaults(s.handleCreate))
	mux.HandleFunc("POST "+execapi.PathContexts+"/{id}"+execapi.PathRestart, s.afterDefaults(s.handleRestart))
	mux.HandleFunc("DELETE "+execapi.PathContexts+"/{id}", s.afterDefaults(s.handleDelete))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, "OK")
	})
	return mux
}

// afterDefaults holds a request until the default contexts exist, so that they
// are always listed and listed first (E2B's server creates them before it
// serves). A client that goes away meanwhile gets nothing.
func (s *Service) afterDefaults(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-s.created:
			h(w, r)
		case <-r.Context().Done():
		}
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func textError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// decodeBody decodes an optional JSON body (empty = zero value).
func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

// contextError writes the status for a context creation failure.
func contextError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrUnknownLanguage), errors.Is(err, errBadRequest):
		textError(w, http.StatusBadRequest, err.Error())
	default:
		textError(w, http.StatusInternalServerError, err.Error())
	}
}

func validEnvName(k string) bool {
	return k != "" && !strings.ContainsAny(k, "=\x00")
}

func (s *Service) handleExecute(w http.ResponseWriter, r *http.Request) {
	var req execapi.ExecuteRequest
	if err := decodeBody(r, &req); err != nil {
		textError(w, http.StatusBadRequest, err.Error())
		return
	}
	id, lang := deref(req.ContextID), deref(req.Language)
	if id != "" && lang != "" {
		textError(w, http.StatusBadRequest, "Only one of context_id or language can be provided")
		return
	}
	for k, v := range req.EnvVars {
		if !validEnvName(k) || strings.ContainsRune(v, 0) {
			textError(w, http.StatusBadRequest, fmt.Sprintf("invalid env var %q", k))
			return
		}
	}
	env := s.sandboxEnv(r)
	var c *codeContext
	if id != "" {
		if c = s.lookup(id); c == nil {
			textError(w, http.StatusNotFound, "Context "+id+" not found")
			return
		}
	} else {
		var err error
		if c, err = s.defaultContext(r.Context(), NormalizeLanguage(lang), env); err != nil {
			contextError(w, err)
			return
		}
	}
	s.run(w, r, c, req, env)
}

// run streams one execution: headers at once, keepalives while waiting for the
// context lock or for output, the cell's lines, a final error line for service
// failures, then end_of_execution.
func (s *Service) run(w http.ResponseWriter, r *http.Request, c *codeContext, req execapi.ExecuteRequest, env map[string]string) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	out := newStream(w, cancel)
	out.start()
	stopKeepalive := s.keepalive(out)
	defer stopKeepalive()
	if !c.lock(ctx) {
		return // client went away while queued
	}
	locked := true
	defer func() {
		if locked {
			c.unlock()
		}
	}()
	if c.deleted.Load() {
		out.serviceError(ErrNameDeleted, "Context "+c.ID+" was deleted")
		out.end()
		return
	}
	execCtx := ctx
	if s.cfg.ExecutionTimeout > 0 {
		var cancelT context.CancelFunc
		execCtx, cancelT = context.WithTimeout(ctx, s.cfg.ExecutionTimeout)
		defer cancelT()
	}
	stopAfter := context.AfterFunc(execCtx, out.suppressErrors)
	err := s.execute(execCtx, c, req, env, out)
	stopAfter()
	restart := s.report(out, c, err)
	out.end()
	stopKeepalive()
	if restart && !c.deleted.Load() {
		locked = false
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			defer c.unlock()
			rctx, cancel := context.WithTimeout(context.Background(), s.cfg.StartTimeout)
			defer cancel()
			if err := c.eng.restart(rctx); err != nil {
				s.log.Warn("restart context after kernel death", "context", c.ID, "err", err)
			}
		}()
	}
}

// execute applies the env, runs the cell and restores per-request env vars.
func (s *Service) execute(ctx context.Context, c *codeContext, req execapi.ExecuteRequest, env map[string]string, out *stream) error {
	if err := c.eng.syncEnv(ctx, env); err != nil {
		if engineFailure(err) {
			return err
		}
		s.log.Warn("sync sandbox env", "context", c.ID, "err", err)
	}
	pushed := false
	if len(req.EnvVars) > 0 {
		if err := c.eng.pushEnv(ctx, req.EnvVars); err != nil {
			return err
		}
		pushed = true
	}
	err := c.eng.execute(ctx, req.Code, out)
	if pushed && !engineFailure(err) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), silentTimeout)
		defer cancel()
		if perr := c.eng.popEnv(rctx); perr != nil {
			s.log.Warn("restore env_vars", "context", c.ID, "err", perr)
		}
	}
	return err
}

// engineFailure reports errors after which the engine's state is gone.
func engineFailure(err error) bool {
	return errors.Is(err, errEngineDied) || errors.Is(err, errEngineRestarted) || errors.Is(err, errEngineClosed)
}

// report writes the error line for err and says whether the context must be
// restarted (its kernel died or was killed).
func (s *Service) report(out *stream, c *codeContext, err error) (restart bool) {
	switch {
	case err == nil:
		return false
	case errors.Is(err, context.DeadlineExceeded):
		out.serviceError(ErrNameTimeout, fmt.Sprintf("Execution timed out after %s", s.cfg.ExecutionTimeout))
	case oomKilled(err):
		out.serviceError(ErrNameOutOfMemory, "The kernel was "+oomDetail(err)+
			"; the context is restarting and its state is lost")
	case errors.Is(err, errEngineDied):
		out.serviceError(ErrNameKernelDied, "The kernel died unexpectedly ("+err.Error()+
			"); the context is restarting and its state is lost")
	case errors.Is(err, errEngineRestarted):
		out.serviceError(ErrNameRestarting, "Context was restarted")
	case errors.Is(err, errEngineClosed):
		out.serviceError(ErrNameDeleted, "Context "+c.ID+" was deleted")
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the stream any more.
	default:
		out.serviceError(ErrNameInternal, err.Error())
	}
	return errors.Is(err, errEngineDied)
}

// keepalive writes a keepalive line whenever the stream was idle for the
// interval; the returned stop function waits for the writer to finish and may be
// called more than once.
func (s *Service) keepalive(out *stream) func() {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(s.cfg.KeepaliveInterval / 5)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				out.keepalive(s.cfg.KeepaliveInterval)
			}
		}
	}()
	var once bool
	return func() {
		if !once {
			once = true
			close(done)
		}
		<-stopped
	}
}

func (s *Service) handleList(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, s.list())
}

func (s *Service) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req execapi.CreateContextRequest
	if err := decodeBody(r, &req); err != nil {
		textError(w, http.StatusBadRequest, err.Error())
		return
	}
	c, err := s.createContext(r.Context(), contextSpec{language: NormalizeLanguage(deref(req.Language)),
		cwd: deref(req.Cwd), user: deref(req.User), env: s.sandboxEnv(r)})
	if err != nil {
		contextError(w, err)
		return
	}
	writeJSON(w, c.Context)
}

func (s *Service) handleRestart(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	c := s.lookup(id)
	if c == nil {
		textError(w, http.StatusNotFound, "Context "+id+" not found")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.StartTimeout)
	defer cancel()
	if err := c.eng.restart(ctx); err != nil {
		textError(w, http.StatusInternalServerError, "restart context "+id+": "+err.Error())
		return
	}
	writeJSON(w, c.Context)
}

func (s *Service) handleDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !s.remove(id) {
		textError(w, http.StatusNotFound, "Context "+id+" not found")
		return
	}
	w.WriteHeader(http.StatusOK)
}
