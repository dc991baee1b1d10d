// Package agentclient drives one sandbox's agent from the host: it waits for
// GET /health and /ready, sends POST /init, reads /metrics and runs commands
// through envd's process service, over that sandbox's own host link. The wire
// shapes are agentapi's (docs/wire/envd.md).
package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/linkdial"
)

// Client talks to one sandbox's agent from the host over that sandbox's own
// host link. Its requests (/health, /ready, /init with env vars and the access
// token) are plain HTTP, so they are bound to the link: no other sandbox can
// receive them (internal/network, internal/linkdial).
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client for the agent at addr:agentapi.EnvdPort whose connections
// are bound to the host interface hostIface (the sandbox's host link; "" =
// unbound, for agents reached without one). token is the sandbox's current
// access token ("" for unsecured or not yet initialised).
func New(addr netip.Addr, hostIface, token string) *Client {
	d := linkdial.Dialer(nil, hostIface)
	return &Client{
		base:  "http://" + net.JoinHostPort(addr.String(), strconv.Itoa(agentapi.EnvdPort)),
		token: token,
		http:  &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DialContext: d.DialContext}},
	}
}

// WaitHealthy polls GET /health every interval until it answers 204 or ctx ends.
// It returns ctx's error wrapped with the last failure seen.
func (c *Client) WaitHealthy(ctx context.Context, interval time.Duration) error {
	return c.poll(ctx, "/health", interval)
}

// WaitReady polls GET /ready every interval until the agent reports the sandbox
// fully booted (204: the default code contexts are live) or ctx ends. It
// returns ctx's error wrapped with the last failure seen.
func (c *Client) WaitReady(ctx context.Context, interval time.Duration) error {
	return c.poll(ctx, "/ready", interval)
}

func (c *Client) poll(ctx context.Context, path string, interval time.Duration) error {
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
		if err != nil {
			return fmt.Errorf("build %s request: %w", path, err)
		}
		if c.token != "" {
			req.Header.Set("X-Access-Token", c.token)
		}
		resp, err := c.http.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("%s answered %d", path, resp.StatusCode)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent %s: %w (last: %v)", path, ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// Init sends POST /init; the agent answers 204.
func (c *Client) Init(ctx context.Context, req agentapi.InitRequest) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode init: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/init", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build init request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		hreq.Header.Set("X-Access-Token", c.token)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return fmt.Errorf("post init: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("init answered %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// Metrics fetches GET /metrics: one sample of the sandbox's resource use as
// the agent sees it from inside. Errors: transport failures, a non-200 answer
// (401 without the access token of a secured sandbox), an undecodable body.
func (c *Client) Metrics(ctx context.Context) (agentapi.Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return agentapi.Metrics{}, fmt.Errorf("build metrics request: %w", err)
	}
	if c.token != "" {
		req.Header.Set("X-Access-Token", c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return agentapi.Metrics{}, fmt.Errorf("get metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return agentapi.Metrics{}, fmt.Errorf("metrics answered %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	var m agentapi.Metrics
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil {
		return agentapi.Metrics{}, fmt.Errorf("decode metrics: %w", err)
	}
	return m, nil
}
