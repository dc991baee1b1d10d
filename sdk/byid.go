package sdk

import (
	"context"
	"net/http"
	"time"

	"github.com/cubby-dev/cubby/sdk/internal/apiclient"
)

// The functions below act on a sandbox by ID through the control plane
// without connecting to it (a connect would resume a paused sandbox and may
// extend its deadline), like the static methods of E2B's SDKs.

// LogsOptions select the sandbox log lines GetLogs returns.
type LogsOptions struct {
	ConnectionOptions
	// Start keeps lines stamped at or after it (millisecond precision); zero = all.
	Start time.Time
	// Limit keeps the most recent lines; 0 means the server's default (1000).
	Limit int
}

// GetLogs returns a sandbox's log lines (its agent and kernels; GET
// /sandboxes/{id}/logs), oldest first. Errors: *NotFoundError for an unknown
// or killed sandbox, *InvalidArgumentError, *AuthenticationError,
// *ConnectionError, *APIError.
func GetLogs(ctx context.Context, id string, opts *LogsOptions) ([]LogEntry, error) {
	var o LogsOptions
	if opts != nil {
		o = *opts
	}
	p := apiclient.GetSandboxLogsParams{}
	if !o.Start.IsZero() {
		p.Start = new(o.Start.UnixMilli())
	}
	if o.Limit > 0 {
		p.Limit = new(int32(o.Limit))
	}
	var out []LogEntry
	err := withControlPlane(&o.ConnectionOptions, func(cp *controlPlane) error {
		_, _, b, err := cp.call(ctx, "get sandbox logs", id, []int{http.StatusOK}, func(ctx context.Context) (*http.Response, error) {
			return cp.client.GetSandboxLogs(ctx, id, &p)
		})
		if err != nil {
			return err
		}
		var raw apiclient.SandboxLogs
		if err := decodeBody("get sandbox logs", b, &raw); err != nil {
			return err
		}
		for _, e := range raw.LogEntries {
			out = append(out, LogEntry{Timestamp: e.Timestamp, Level: string(e.Level), Message: e.Message, Fields: e.Fields})
		}
		return nil
	})
	return out, err
}

// GetMetrics returns a sandbox's resource samples between opts.Start and
// opts.End (zero: from its start, until now), oldest first. Errors as
// Sandbox.GetMetrics.
func GetMetrics(ctx context.Context, id string, opts *MetricsOptions, conn *ConnectionOptions) ([]SandboxMetrics, error) {
	var o MetricsOptions
	if opts != nil {
		o = *opts
	}
	var out []SandboxMetrics
	err := withControlPlane(conn, func(cp *controlPlane) error {
		ms, err := cp.metrics(ctx, id, o.Start, o.End)
		out = metricsFrom(ms)
		return err
	})
	return out, err
}

// SetTimeout sets a running sandbox's deadline to now + timeout (it may
// shorten it). Errors as Sandbox.SetTimeout.
func SetTimeout(ctx context.Context, id string, timeout time.Duration, conn *ConnectionOptions) error {
	if timeout < 0 {
		return &InvalidArgumentError{Message: "SetTimeout: timeout must not be negative"}
	}
	return withControlPlane(conn, func(cp *controlPlane) error { return cp.setTimeout(ctx, id, timeout) })
}

// Pause pauses a running sandbox; false means it was already paused.
// Errors as Sandbox.Pause.
func Pause(ctx context.Context, id string, opts *PauseOptions, conn *ConnectionOptions) (bool, error) {
	var keep *bool
	if opts != nil {
		keep = opts.KeepMemory
	}
	var paused bool
	err := withControlPlane(conn, func(cp *controlPlane) (err error) {
		paused, err = cp.pause(ctx, id, keep)
		return err
	})
	return paused, err
}

// metricsFrom converts the wire samples.
func metricsFrom(ms []apiclient.SandboxMetric) []SandboxMetrics {
	out := make([]SandboxMetrics, len(ms))
	for i, m := range ms {
		out[i] = SandboxMetrics{
			Timestamp: m.Timestamp, CPUUsedPct: m.CpuUsedPct, CPUCount: int(m.CpuCount),
			MemUsed: m.MemUsed, MemTotal: m.MemTotal, MemCache: m.MemCache,
			DiskUsed: m.DiskUsed, DiskTotal: m.DiskTotal,
		}
	}
	return out
}
