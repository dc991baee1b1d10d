// Package telemetry exposes Cubby server metrics in the Prometheus text
// exposition format (https://prometheus.io/docs/instrumenting/exposition_formats/):
// sandboxes by state, create latency, kills by reason, API requests, gateway
// requests and template builds. Every metric is registered on a private
// registry held by Metrics (no global state); a nil *Metrics records nothing.
package telemetry

import (
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// StateCounter reports how many sandboxes are in each state ("running",
// "paused") at scrape time. Implementations answer from memory and are safe for
// concurrent use.
type StateCounter interface {
	SandboxStates() map[string]int
}

// Create outcomes (label `outcome` of cubby_sandbox_create_duration_seconds).
const (
	OutcomeOK    = "ok"
	OutcomeError = "error"
)

// Metrics holds the server's collectors. Methods are safe for concurrent use and
// do nothing on a nil receiver.
type Metrics struct {
	reg       *prometheus.Registry
	create    *prometheus.HistogramVec
	kills     *prometheus.CounterVec
	api       *prometheus.CounterVec
	gateway   *prometheus.CounterVec
	templates *prometheus.CounterVec
	pool      *prometheus.GaugeVec
	target    *prometheus.GaugeVec
	claims    *prometheus.CounterVec
	egress    egressMetrics
}

// Pool claim outcomes (label `outcome` of cubby_pool_claims_total).
const (
	ClaimHit  = "hit"  // a warm sandbox was handed out
	ClaimMiss = "miss" // the pool was empty (or could not serve the request): cold create
)

// New returns Metrics on a fresh registry with the Go runtime and process
// collectors. The cubby_sandboxes gauge appears once WatchStates is called.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		create: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "cubby_sandbox_create_duration_seconds",
			Help: "Time to create a sandbox (POST /sandboxes), in seconds, by template and outcome (ok, error).",
			// 5 ms .. ~80 s: warm-pool claims take milliseconds, cold runc
			// creates ~0.1-1 s, gVisor and loaded hosts longer.
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15),
		}, []string{"template", "outcome"}),
		kills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cubby_sandbox_kills_total",
			Help: "Sandboxes ended, by reason (request, timeout, gone, lost, create_failed).",
		}, []string{"reason"}),
		api: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cubby_api_requests_total",
			Help: "Control-plane API requests by route pattern and HTTP status code.",
		}, []string{"route", "code"}),
		gateway: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cubby_gateway_requests_total",
			Help: "Sandbox-side requests handled by the gateway, by HTTP status class (2xx..5xx; 502 is the gateway's own error answer).",
		}, []string{"code"}),
		templates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cubby_template_builds_total",
			Help: "Template builds by outcome (ok, error).",
		}, []string{"outcome"}),
		pool: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cubby_pool_sandboxes",
			Help: "Warm-pool sandboxes by template and state (ready: waiting to be claimed; booting).",
		}, []string{"template", "state"}),
		target: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "cubby_pool_target_sandboxes",
			Help: "Warm sandboxes each pool is asked to keep (--pool TEMPLATE=N), by template.",
		}, []string{"template"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cubby_pool_claims_total",
			Help: "Creates of a pooled template by outcome (hit: served from the warm pool; miss: cold create).",
		}, []string{"template", "outcome"}),
	}
	m.reg.MustRegister(m.create, m.kills, m.api, m.gateway, m.templates, m.pool, m.target, m.claims,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.egress = newEgressMetrics(m.reg)
	return m
}

// WatchStates registers the cubby_sandboxes{state} gauge, read from src at each
// scrape. Errors: a second call (the gauge is already registered).
func (m *Metrics) WatchStates(src StateCounter) error {
	if err := m.reg.Register(stateCollector{src}); err != nil {
		return fmt.Errorf("register sandbox state gauge: %w", err)
	}
	return nil
}

// Registry returns the registry the metrics are registered on (for tests and
// for registering further collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition format (GET /metrics).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// ObserveCreate records one sandbox create of template taking d with outcome
// OutcomeOK or OutcomeError.
func (m *Metrics) ObserveCreate(template, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.create.WithLabelValues(template, outcome).Observe(d.Seconds())
}

// SandboxKilled counts one ended sandbox; reason must come from a small fixed set.
func (m *Metrics) SandboxKilled(reason string) {
	if m == nil {
		return
	}
	m.kills.WithLabelValues(reason).Inc()
}

// TemplateBuilt counts one template build with outcome OutcomeOK or OutcomeError.
func (m *Metrics) TemplateBuilt(outcome string) {
	if m == nil {
		return
	}
	m.templates.WithLabelValues(outcome).Inc()
}

// PoolSize sets the warm pool's figures for template: ready sandboxes and
// sandboxes booting.
func (m *Metrics) PoolSize(template string, ready, booting int) {
	if m == nil {
		return
	}
	m.pool.WithLabelValues(template, "ready").Set(float64(ready))
	m.pool.WithLabelValues(template, "booting").Set(float64(booting))
}

// PoolTarget sets the number of warm sandboxes template's pool is asked to keep.
func (m *Metrics) PoolTarget(template string, size int) {
	if m == nil {
		return
	}
	m.target.WithLabelValues(template).Set(float64(size))
}

// PoolClaim counts one create of a pooled template with outcome ClaimHit or ClaimMiss.
func (m *Metrics) PoolClaim(template, outcome string) {
	if m == nil {
		return
	}
	m.claims.WithLabelValues(template, outcome).Inc()
}

// stateCollector is the cubby_sandboxes{state} gauge, read at scrape time.
type stateCollector struct{ src StateCounter }

var sandboxesDesc = prometheus.NewDesc("cubby_sandboxes",
	"Live sandboxes by state (running, paused).", []string{"state"}, nil)

// knownStates are always exported, with 0 when no sandbox is in them.
var knownStates = []string{"running", "paused"}

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sandboxesDesc }

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.src.SandboxStates()
	for _, st := range knownStates {
		ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(counts[st]), st)
	}
	for st, n := range counts {
		if st != "running" && st != "paused" {
			ch <- prometheus.MustNewConstMetric(sandboxesDesc, prometheus.GaugeValue, float64(n), st)
		}
	}
}
