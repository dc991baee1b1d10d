package mcpserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/cubby-dev/cubby/sdk"
)

// explain turns an SDK error of op (on sandbox id, "" when none) into the
// message of a tool error: what went wrong and what the agent can do.
func explain(err error, op, id string) error {
	var (
		nf   *sdk.NotFoundError
		auth *sdk.AuthenticationError
		to   *sdk.TimeoutError
		inv  *sdk.InvalidArgumentError
		conn *sdk.ConnectionError
		rate *sdk.RateLimitError
	)
	switch {
	case errors.Is(err, errNoSession):
		return err
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: cancelled by the client", op)
	case errors.Is(err, sdk.ErrSandboxKilled):
		return fmt.Errorf("%s: sandbox %s was killed, paused or reached its timeout during the call; what ran in it is gone (sandbox_list shows the live sandboxes)", op, id)
	case errors.As(err, &nf) && nf.Resource == sdk.ResourceSandbox:
		return fmt.Errorf("%s: sandbox %s not found: it was killed, timed out or never existed (sandbox_list shows the live ones)", op, nf.ID)
	case errors.As(err, &nf) && nf.Resource == sdk.ResourceTemplate:
		return fmt.Errorf("%s: template %s not found (template_list shows the available ones)", op, nf.ID)
	case errors.As(err, &nf) && nf.Resource == sdk.ResourceFile:
		return fmt.Errorf("%s: %s: no such file or directory in sandbox %s (relative paths start at the user's home)", op, nf.ID, id)
	case errors.As(err, &nf) && nf.Resource == sdk.ResourceProcess:
		return fmt.Errorf("%s: no process %s in sandbox %s: it has exited or the pid is wrong", op, nf.ID, id)
	case errors.As(err, &nf):
		return fmt.Errorf("%s: %s", op, nf.Error())
	case errors.As(err, &auth):
		return fmt.Errorf("%s: the API key was rejected: %s", op, auth.Message)
	case errors.As(err, &to):
		return fmt.Errorf("%s: %s", op, to.Message)
	case errors.As(err, &inv):
		return fmt.Errorf("%s: %s", op, inv.Message)
	case errors.As(err, &rate):
		return fmt.Errorf("%s: rate limited by the server, retry in %s", op, rate.RetryAfter)
	case errors.As(err, &conn):
		return fmt.Errorf("%s: cannot reach the Cubby server at %s: %v", op, conn.URL, conn.Err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// isSandboxNotFound reports whether err says a sandbox does not exist.
func isSandboxNotFound(err error) bool {
	var nf *sdk.NotFoundError
	return errors.As(err, &nf) && nf.Resource == sdk.ResourceSandbox
}
