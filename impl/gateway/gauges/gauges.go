// Package gauges exports, at scrape time, the state operators alert on:
// each upstream's credential state and polled usage windows, each
// principal's budget use, and the configuration generation of the
// replica's snapshot beside the stored one. The values are read when
// Prometheus scrapes, so no gauge can go stale on a replica that stopped
// updating it.
package gauges

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Snapshots gives the replica's current snapshot.
type Snapshots interface {
	Current() *snapshot.Snapshot
}

// Store is what the collector reads from the database.
type Store interface {
	ConfigGeneration(ctx context.Context) (int64, error)
	GetQuota(ctx context.Context, upstreamID string) (*store.QuotaObservation, error)
}

// Budgets tells how full a principal's budgets are (limits.Limiter).
type Budgets interface {
	BudgetUsed(principal string, ls []limits.Limit) (float64, bool)
}

// Credential states of svc_upstream_credential_state.
const (
	StateOK      = "ok"      // holds a credential requests may use
	StateRefused = "refused" // the provider refused the OAuth refresh grant for good
	StateMissing = "missing" // no credential, or one the master key cannot open
)

var states = [...]string{StateOK, StateRefused, StateMissing}

// Collector is a prometheus.Collector of the state gauges.
type Collector struct {
	snaps   Snapshots
	st      Store
	budgets Budgets
	log     *slog.Logger
	// timeout bounds the database reads of one scrape.
	timeout time.Duration

	credential, utilization, resetsAt, budget, genSnapshot, genStored *prometheus.Desc
}

// New returns the collector; st and budgets may be nil (their gauges are
// then absent).
func New(snaps Snapshots, st Store, budgets Budgets, log *slog.Logger) *Collector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Collector{
		snaps: snaps, st: st, budgets: budgets, log: log, timeout: 2 * time.Second,
		credential: prometheus.NewDesc("svc_upstream_credential_state",
			"1 for the state of each enabled upstream's credential (ok, refused, missing), 0 for the others.", []string{"upstream", "state"}, nil),
		utilization: prometheus.NewDesc("svc_upstream_quota_utilization_ratio",
			"Utilisation of a subscription upstream's usage window at the last usage poll (1: used up).", []string{"upstream", "window"}, nil),
		resetsAt: prometheus.NewDesc("svc_upstream_quota_resets_at_seconds",
			"Unix time the usage window of the last usage poll resets.", []string{"upstream", "window"}, nil),
		budget: prometheus.NewDesc("svc_principal_budget_used_ratio",
			"Share of the fullest of an enabled principal's budgets spent in its sliding window (1: requests are refused).", []string{"principal"}, nil),
		genSnapshot: prometheus.NewDesc("svc_config_generation_snapshot",
			"Configuration generation this replica serves.", nil, nil),
		genStored: prometheus.NewDesc("svc_config_generation_stored",
			"Configuration generation stored in the database, read at the scrape.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.credential, c.utilization, c.resetsAt, c.budget, c.genSnapshot, c.genStored} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snaps.Current()
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.genSnapshot, prometheus.GaugeValue, float64(s.Generation))
	for _, u := range s.Upstreams {
		if !u.Enabled {
			continue // switched off on purpose: nothing to alert on
		}
		state := CredentialState(u, s.Errors[u.ID] != "")
		for _, st := range states {
			v := 0.0
			if st == state {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.credential, prometheus.GaugeValue, v, u.Name, st)
		}
	}
	if c.budgets != nil {
		for _, p := range s.Principals() {
			if !p.Enabled {
				continue
			}
			if r, ok := c.budgets.BudgetUsed(p.ID, p.Limits); ok {
				ch <- prometheus.MustNewConstMetric(c.budget, prometheus.GaugeValue, r, p.Name)
			}
		}
	}
	if c.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if gen, err := c.st.ConfigGeneration(ctx); err != nil {
		c.log.Warn("stored configuration generation unreadable for /metrics", "err", err)
	} else {
		ch <- prometheus.MustNewConstMetric(c.genStored, prometheus.GaugeValue, float64(gen))
	}
	for _, u := range s.Upstreams {
		if !u.Enabled || u.CredentialKind != credential.OAuth {
			continue
		}
		q, err := c.st.GetQuota(ctx, u.ID)
		if err != nil {
			continue // never polled (not found), or unreadable: no series rather than a wrong one
		}
		for _, w := range []struct {
			name string
			win  store.QuotaWindow
		}{{"five_hour", q.FiveHour}, {"seven_day", q.SevenDay}} {
			if w.win.ResetsAt == nil {
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.utilization, prometheus.GaugeValue, w.win.Utilization/100, u.Name, w.name)
			ch <- prometheus.MustNewConstMetric(c.resetsAt, prometheus.GaugeValue, float64(w.win.ResetsAt.Unix()), u.Name, w.name)
		}
	}
}

// CredentialState is the state of an enabled upstream's credential
// (StateOK, StateRefused, StateMissing); undecryptable: the snapshot could
// not open it.
func CredentialState(u *snapshot.Upstream, undecryptable bool) string {
	switch {
	case u.RefreshRefused:
		return StateRefused
	case u.Credential == "" || undecryptable:
		return StateMissing
	}
	return StateOK
}
