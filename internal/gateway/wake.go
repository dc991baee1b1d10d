package gateway

import (
	"context"
	"time"

	"github.com/cubby-dev/cubby/internal/sandboxid"
)

// WakeTimeout bounds how long a request to a paused sandbox waits for it to resume.
const WakeTimeout = 2 * time.Minute

// Waker is implemented by Resolvers whose paused sandboxes can be resumed by
// traffic (E2B lifecycle autoResume). The gateway calls Wake for a request to a
// known sandbox that is not running; the request waits for the resume and is then
// proxied. Implementations serialise concurrent wakes of one sandbox.
type Waker interface {
	// Wake resumes sandbox id if it is paused and its lifecycle allows traffic to
	// resume it, and returns its target once running. ok is false when the sandbox
	// is unknown, killed, or paused without autoResume (the gateway answers 502);
	// err reports a failed resume (also 502, logged).
	Wake(ctx context.Context, id string) (t Target, ok bool, err error)
}

// wake resumes a paused sandbox through the Resolver's Waker, if it has one.
func (g *Gateway) wake(ctx context.Context, id string) (Target, bool) {
	w, ok := g.res.(Waker)
	if !ok || !sandboxid.Valid(id) {
		return Target{}, false
	}
	if t, known := g.res.Resolve(id); !known || t.Running {
		return Target{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, WakeTimeout)
	defer cancel()
	t, ok, err := w.Wake(ctx, id)
	if err != nil {
		g.log.Warn("auto-resume failed", "sandbox", id, "err", err)
		return Target{}, false
	}
	if !ok || !t.Running || !t.Addr.IsValid() {
		return Target{}, false
	}
	g.log.Debug("auto-resumed sandbox for a request", "sandbox", id)
	return t, true
}
