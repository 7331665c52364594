package pricing

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// MaxUnknownModels bounds the model label of svc_proxy_cost_unknown_model_total:
// a client names the model, so past this many distinct names per process
// the rest are counted under "other".
const MaxUnknownModels = 50

// Meter prices recorded request events with the installed catalog and
// counts spend. It runs on the usage recorder's goroutine, never on the
// request path.
type Meter struct {
	catalog func() *Catalog
	// name is a principal's current name (its id when it is gone).
	name    func(principalID string) string
	spend   *prometheus.CounterVec
	unknown *prometheus.CounterVec

	mu            sync.Mutex
	unknownModels map[string]bool
}

// NewMeter registers the spend metrics on reg. Series: spend by principal
// name and model (bounded by principals × priced models) and requests of
// models the catalog did not price (at most MaxUnknownModels + 1 series).
func NewMeter(reg prometheus.Registerer, catalog func() *Catalog, name func(string) string) *Meter {
	m := &Meter{
		catalog: catalog, name: name, unknownModels: map[string]bool{},
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_proxy_spend_usd_total",
			Help: "Cost of recorded requests in US dollars by principal name and model, priced with the installed price catalog.",
		}, []string{"principal", "model"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_proxy_cost_unknown_model_total",
			Help: "Recorded requests without a cost because the installed price catalog does not price their model (model \"other\" past 50 distinct names).",
		}, []string{"model"}),
	}
	if reg != nil {
		reg.MustRegister(m.spend, m.unknown)
	}
	return m
}

// Price sets ev's cost and catalog version, or leaves the cost nil when
// the model is not priced, and counts it.
func (m *Meter) Price(ev *store.RequestEvent) {
	cat := m.catalog()
	cost, ok := cat.Cost(ev.Model, Tokens{Input: ev.InputTokens, Output: ev.OutputTokens, CacheWrite: ev.CacheCreationInputTokens,
		CacheWrite1h: ev.CacheCreation1hInputTokens, CacheRead: ev.CacheReadInputTokens})
	if !ok {
		ev.CostNanos, ev.PriceVersion = nil, ""
		m.unknown.WithLabelValues(m.unknownLabel(ev.Model)).Inc()
		return
	}
	n := int64(cost)
	ev.CostNanos, ev.PriceVersion = &n, cat.Version
	if cost > 0 {
		name := ev.PrincipalID
		if m.name != nil {
			name = m.name(ev.PrincipalID)
		}
		m.spend.WithLabelValues(name, ev.Model).Add(cost.Dollars())
	}
}

func (m *Meter) unknownLabel(model string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unknownModels[model] {
		return model
	}
	if len(m.unknownModels) >= MaxUnknownModels {
		return "other"
	}
	m.unknownModels[model] = true
	return model
}
