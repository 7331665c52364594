package cloud

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count what the platforms answered, by the platform's own name
// for it, so an operator tells Bedrock's throttling from a quota on
// Vertex from a credential the platform refuses.
type Metrics struct {
	requests *prometheus.CounterVec
	tokens   *prometheus.CounterVec
}

// Outcomes besides the platform's error names.
const (
	outcomeOK = "ok"
	// outcomeCredential: no credential or token could be had.
	outcomeCredential = "credential_error"
	// outcomeOther: an error name the transport does not know.
	outcomeOther = "other"
)

// NewMetrics registers the cloud metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_cloud_requests_total",
		Help: "Requests sent to cloud upstreams by kind (bedrock, vertex) and outcome: ok, the platform's error (Bedrock's exception, Vertex's status; stream_ before an exception that ended a stream), credential_error or other.",
	}, []string{"kind", "outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_proxy_cloud_token_fetches_total",
			Help: "Vertex access tokens fetched from the token endpoint, by result (ok, error); an error while the old token is still valid keeps it.",
		}, []string{"result"})}
	if reg != nil {
		reg.MustRegister(m.requests, m.tokens)
	}
	return m
}

func (m *Metrics) tokenFetched(ok bool) {
	if m == nil {
		return
	}
	r := "ok"
	if !ok {
		r = "error"
	}
	m.tokens.WithLabelValues(r).Inc()
}

func (m *Metrics) observe(kind, outcome string) {
	if m != nil {
		m.requests.WithLabelValues(kind, outcome).Inc()
	}
}
