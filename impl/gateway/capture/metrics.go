package capture

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of svc_proxy_captures_total.
const (
	OutcomeStored = "stored"
	// OutcomeDropped: the queue was full; the exchange is lost.
	OutcomeDropped = "dropped"
	// OutcomeTruncated: a body was longer than the cap (counted besides
	// the exchange's stored or dropped outcome).
	OutcomeTruncated = "truncated"
	// OutcomeFailed: sealing or writing failed.
	OutcomeFailed = "failed"
)

// Metrics are the capture series.
type Metrics struct {
	captures *prometheus.CounterVec
}

// NewMetrics registers the series on reg (nil: unregistered), every
// outcome pre-set to zero.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{captures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_proxy_captures_total",
		Help: "Captured exchanges of opted-in principals, by outcome."}, []string{"outcome"})}
	for _, o := range []string{OutcomeStored, OutcomeDropped, OutcomeTruncated, OutcomeFailed} {
		m.captures.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.captures)
	}
	return m
}

func (m *Metrics) track(outcome string) { m.captures.WithLabelValues(outcome).Inc() }

func (m *Metrics) add(outcome string, n int) { m.captures.WithLabelValues(outcome).Add(float64(n)) }
