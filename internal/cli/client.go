package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/server"
	"github.com/cubby-dev/cubby/sdk"
)

// defaultServerURL is where `cubby serve` listens by default; the client
// commands use it when neither E2B_API_URL/--api-url nor E2B_DOMAIN is set.
const defaultServerURL = "http://" + server.DefaultListen

// keepAliveEvery and keepAliveFor: while a shell, exec or run is attached, the
// sandbox's deadline is pushed to at least now+keepAliveFor every
// keepAliveEvery (a connect never shortens a deadline, docs/wire/e2b-api.md §2.3).
const (
	keepAliveEvery = time.Minute
	keepAliveFor   = 5 * time.Minute
)

// clientFlags are the connection flags of the client commands. Unset values
// come from the environment variables of the official SDKs (docs/wire/e2b-api.md §1.1).
type clientFlags struct {
	apiURL     string
	apiKey     string
	sandboxURL string
}

// bind registers the connection flags as persistent flags of cmd.
func (c *clientFlags) bind(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&c.apiURL, "api-url", "", "control-plane URL (default $E2B_API_URL, else "+defaultServerURL+" unless $E2B_DOMAIN is set)")
	f.StringVar(&c.apiKey, "api-key", "", "API key (default $E2B_API_KEY)")
	f.StringVar(&c.sandboxURL, "sandbox-url", "", "base URL of in-sandbox requests (default $E2B_SANDBOX_URL, else the API URL unless $E2B_DOMAIN is set)")
}

// options resolves the flags and environment into SDK connection options.
// Without E2B_DOMAIN the server is taken to be a Cubby server serving the API
// and the sandbox gateway on one address; with it, the SDK's E2B defaults apply.
func (c *clientFlags) options() sdk.ConnectionOptions {
	domain := os.Getenv("E2B_DOMAIN")
	apiURL := firstSet(c.apiURL, os.Getenv("E2B_API_URL"))
	if apiURL == "" && domain == "" {
		apiURL = defaultServerURL
	}
	sandboxURL := firstSet(c.sandboxURL, os.Getenv("E2B_SANDBOX_URL"))
	if sandboxURL == "" && domain == "" {
		sandboxURL = apiURL
	}
	return sdk.ConnectionOptions{
		APIKey:     firstSet(c.apiKey, os.Getenv("E2B_API_KEY")),
		APIURL:     apiURL,
		SandboxURL: sandboxURL,
	}
}

// serverURL is the control-plane URL used in error hints.
func (c *clientFlags) serverURL() string {
	o := c.options()
	if o.APIURL != "" {
		return o.APIURL
	}
	return "https://api." + os.Getenv("E2B_DOMAIN")
}

// connect attaches to a running sandbox, resuming it when paused, and
// extends its deadline to at least now+keepAliveFor.
func (c *clientFlags) connect(ctx context.Context, id string) (*sdk.Sandbox, error) {
	return sdk.Connect(ctx, id, &sdk.ConnectOptions{ConnectionOptions: c.options(), Timeout: keepAliveFor})
}

// run wraps a client command's RunE so its errors become messages that say
// what to do (see explain).
func (c *clientFlags) run(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		if err == nil {
			return nil
		}
		var ee exitError
		if errors.As(err, &ee) {
			return ee
		}
		return explain(err, c.serverURL(), c.options().APIKey != "")
	}
}

// keepAlive pushes sb's deadline forward until the returned stop is called,
// so an attached session does not see its sandbox time out under it.
func keepAlive(ctx context.Context, sb *sdk.Sandbox) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(keepAliveEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = sb.Resume(ctx, &sdk.ResumeOptions{Timeout: keepAliveFor})
			}
		}
	}()
	return func() { cancel(); <-done }
}

// explain turns an SDK error into a message for a person at a terminal:
// what went wrong and what to do about it. apiURL is the configured
// control-plane URL; haveKey says whether an API key was configured.
func explain(err error, apiURL string, haveKey bool) error {
	var (
		auth     *sdk.AuthenticationError
		conn     *sdk.ConnectionError
		notFound *sdk.NotFoundError
		timeout  *sdk.TimeoutError
		apiErr   *sdk.APIError
	)
	switch {
	case errors.Is(err, context.Canceled):
		return exitError{code: 130}
	case errors.As(err, &auth) && !haveKey:
		return errors.New("no API key: set E2B_API_KEY or pass --api-key (`cubby keys create` on the server host makes one)")
	case errors.As(err, &auth) && strings.Contains(auth.Message, "API key"):
		return fmt.Errorf("the server at %s rejected the API key: check E2B_API_KEY or --api-key (`cubby keys list` on the server host shows the active keys)", apiURL)
	case errors.As(err, &conn):
		cause := conn.Err
		if op := (*net.OpError)(nil); errors.As(cause, &op) {
			cause = op.Err
		}
		return fmt.Errorf("cannot reach %s (%v): is cubby serve running at %s? Set E2B_API_URL/--api-url (and E2B_SANDBOX_URL/--sandbox-url) to its address",
			conn.URL, cause, conn.URL)
	case errors.As(err, &notFound) && notFound.Resource == sdk.ResourceSandbox:
		return fmt.Errorf("sandbox %s not found: it was killed, timed out or never existed; `cubby sandbox list` shows the live ones", notFound.ID)
	case errors.As(err, &notFound) && notFound.Resource == sdk.ResourceTemplate:
		return fmt.Errorf("template %s not found: `cubby template list` on the server host shows the built ones", notFound.ID)
	case errors.As(err, &notFound) && notFound.Resource == sdk.ResourceFile:
		return fmt.Errorf("%s: no such file or directory in the sandbox (relative paths start at the user's home)", notFound.ID)
	case errors.Is(err, sdk.ErrSandboxKilled):
		return errors.New("the sandbox was killed or reached its end of life during the call: create a new one with `cubby sandbox create`, or give it a longer --timeout")
	case errors.As(err, &timeout):
		return fmt.Errorf("%s; pass a longer --timeout", timeout.Message)
	case errors.As(err, &apiErr) && apiErr.StatusCode == 501:
		return fmt.Errorf("the server does not support this: %s", apiErr.Message)
	}
	return err
}

// firstSet returns the first non-empty value.
func firstSet(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// parsePairs parses repeated K=V flag values into a map; flag names the flag
// in errors. An empty list gives nil.
func parsePairs(flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(vals))
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", flag, v)
		}
		out[k] = val
	}
	return out, nil
}
