package interpreter

import (
	"context"
	"errors"
)

// warmCode is executed silently (Jupyter messaging v5.3 execute_request with
// silent=true: no execution count, no history, no output) in each default
// Python kernel once it is up, so IPython's first-cell work is not paid by the
// user's first execution.
const warmCode = "pass"

// Warm runs warmCode silently in every live Python context. A context busy
// executing is skipped. It returns the contexts' errors joined.
func (s *Service) Warm(ctx context.Context) error {
	var errs []error
	for _, c := range s.snapshot() {
		ke, ok := c.eng.(*kernelEngine)
		if !ok || c.Language != LangPython || !c.tryLock() {
			continue
		}
		errs = append(errs, ke.silent(ctx, warmCode))
		c.unlock()
	}
	return errors.Join(errs...)
}

// SyncEnv brings every live context's environment up to the sandbox env, so
// the first execution after an /init that changed the env vars does not pay
// for the update. It waits for a busy context's turn until ctx ends. It
// returns the contexts' errors joined.
func (s *Service) SyncEnv(ctx context.Context) error {
	env := s.sandboxEnv(nil)
	var errs []error
	for _, c := range s.snapshot() {
		if !c.lock(ctx) {
			return ctx.Err()
		}
		if !c.deleted.Load() {
			errs = append(errs, c.eng.syncEnv(ctx, env))
		}
		c.unlock()
	}
	return errors.Join(errs...)
}

// snapshot returns the live contexts.
func (s *Service) snapshot() []*codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*codeContext, 0, len(s.contexts))
	for _, c := range s.contexts {
		out = append(out, c)
	}
	return out
}

// tryLock takes the context's turn if it is free.
func (c *codeContext) tryLock() bool {
	select {
	case c.sem <- struct{}{}:
		return true
	default:
		return false
	}
}
