package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Decisions of the egress policy (label `decision` of cubby_egress_decisions_total).
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// egressMetrics are the egress proxy's counters.
type egressMetrics struct {
	decisions *prometheus.CounterVec
	restarts  prometheus.Counter
}

func newEgressMetrics(reg *prometheus.Registry) egressMetrics {
	e := egressMetrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cubby_egress_decisions_total",
			Help: "Egress policy decisions by kind (egress proxy: http one request, tls one connection by server name, tcp one connection by address, dns one query; nftables: ip, a new connection allowed or a packet rejected by an address entry, at most 20 per second) and decision (allow, deny).",
		}, []string{"kind", "decision"}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cubby_egress_proxy_restarts_total",
			Help: "Restarts of the egress proxy process after it exited (steered egress is refused while it is down).",
		}),
	}
	reg.MustRegister(e.decisions, e.restarts)
	return e
}

// EgressDecision counts one decision of kind (http, tls, tcp, dns).
func (m *Metrics) EgressDecision(kind string, allow bool) {
	if m == nil || kind == "" {
		return
	}
	d := DecisionDeny
	if allow {
		d = DecisionAllow
	}
	m.egress.decisions.WithLabelValues(kind, d).Inc()
}

// EgressProxyRestarted counts one restart of the egress proxy process.
func (m *Metrics) EgressProxyRestarted() {
	if m == nil {
		return
	}
	m.egress.restarts.Inc()
}
