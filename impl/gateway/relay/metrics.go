package relay

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/limits"
)

// Metrics are the proxy path's Prometheus series. Children are resolved once
// per status code and cached, so a request costs two atomic adds.
type Metrics struct {
	requests  *prometheus.CounterVec
	duration  prometheus.Histogram
	failovers prometheus.Counter
	// Resilience of the proxy path (docs/resilience.md).
	headerTimeouts, idleTimeouts prometheus.Counter
	interrupted                  prometheus.Counter
	lazyRefreshes                prometheus.Counter
	limitedBy                    [4]prometheus.Counter // by limits.Kind
	byCode                       [600]prometheus.Counter
}

// NewMetrics registers the proxy metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_proxy_requests_total",
			Help: "Requests on the proxy path by HTTP status code.",
		}, []string{"code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "svc_proxy_request_duration_seconds",
			Help:    "Time from request arrival to the last byte relayed.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svc_proxy_upstream_failovers_total",
			Help: "Times a request moved on to the next candidate upstream.",
		}),
	}
	limited := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_principal_limited_total",
		Help: "Requests refused with 429 by a principal's default_limits, by limit kind.",
	}, []string{"kind"})
	for _, k := range []limits.Kind{limits.Requests, limits.Tokens, limits.USD} {
		m.limitedBy[k] = limited.WithLabelValues(k.String())
	}
	timeouts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_upstream_timeouts_total",
		Help: "Upstream responses given up on: phase headers (no response headers within the header timeout; the request fails over) or idle (nothing read within the idle deadline).",
	}, []string{"phase"})
	m.headerTimeouts, m.idleTimeouts = timeouts.WithLabelValues("headers"), timeouts.WithLabelValues("idle")
	m.interrupted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_proxy_upstream_interrupted_total",
		Help: "Upstream responses cut or gone idle after their headers: the client got an error event (streams) or a 502.",
	})
	m.lazyRefreshes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "svc_proxy_lazy_refresh_started_total",
		Help: "Lazy OAuth token refreshes the proxy path started (a request met an expired or refused token).",
	})
	reg.MustRegister(m.requests, m.duration, m.failovers, limited, timeouts, m.interrupted, m.lazyRefreshes)
	for _, c := range []int{200, 400, 401, 403, 404, 413, 429, 500, 502, 503, 529} {
		m.byCode[c] = m.requests.WithLabelValues(strconv.Itoa(c))
	}
	return m
}

func (m *Metrics) limited(k limits.Kind) {
	if int(k) < len(m.limitedBy) && m.limitedBy[k] != nil {
		m.limitedBy[k].Inc()
	}
}

func (m *Metrics) observe(code int, d time.Duration) {
	if code <= 0 || code >= len(m.byCode) {
		code = 0
	}
	c := m.byCode[code]
	if c == nil {
		c = m.requests.WithLabelValues(strconv.Itoa(code))
	}
	c.Inc()
	if d > 0 {
		m.duration.Observe(d.Seconds())
	}
}
