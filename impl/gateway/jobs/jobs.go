// Package jobs defines the gateway's durable singleton jobs: usage rollups,
// pruning, upstream metadata refresh and price catalog fetching. Each is idempotent, so the scheduler's at-least-once
// delivery never double-counts.
package jobs

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Job type names.
const (
	UsageRollup = "usage_rollup"
	Prune       = "prune"
)

// Retention is how long each prunable table keeps rows.
type Retention struct {
	RequestEvents    time.Duration `yaml:"request_events"`
	AuditLog         time.Duration `yaml:"audit_log"`
	UpstreamAffinity time.Duration `yaml:"upstream_affinity"`
	// CapturedExchanges: the bodies of opted-in principals (package
	// capture), kept shorter than their events by default.
	CapturedExchanges time.Duration `yaml:"captured_exchanges"`
}

// DefaultRetention keeps a month of request events, a quarter of audit
// log, a week of affinity and a week of captured exchanges.
var DefaultRetention = Retention{RequestEvents: 30 * 24 * time.Hour, AuditLog: 90 * 24 * time.Hour, UpstreamAffinity: 7 * 24 * time.Hour,
	CapturedExchanges: 7 * 24 * time.Hour}

// Deps are what the jobs need.
type Deps struct {
	// Options' clock stamps and bounds the jobs' work (nil: the real one).
	service.Options
	Store     store.Store
	Metrics   *scheduler.Metrics
	Retention Retention
	// Upstreams yields the current upstreams with opened credentials.
	Upstreams func() []*snapshot.Upstream
	// HTTP is the client for provider and catalog requests.
	HTTP *http.Client
	// CatalogURL is the price catalog's location; empty disables fetching.
	CatalogURL string
	// Every overrides a job type's cron interval by name.
	Every map[string]time.Duration
}

// DefaultEvery are the cron intervals.
var DefaultEvery = map[string]time.Duration{
	UsageRollup: 5 * time.Minute, Prune: time.Hour, MetadataRefresh: 30 * time.Minute, PriceCatalogFetch: time.Hour,
	// The OAuth upstreams' periodic jobs (packages warmup, oauth, quota).
	"warmup_watchdog": 5 * time.Minute, "oauth_watchdog": 10 * time.Minute, "usage_poll": 5 * time.Minute, "quota_gc": time.Hour,
	"keepalive_cleanup": 10 * time.Minute,
}

// Interval is the cron interval of a job type: an override, else the default.
func Interval(overrides map[string]time.Duration, name string) time.Duration {
	if v, ok := overrides[name]; ok && v > 0 {
		return v
	}
	return DefaultEvery[name]
}

// Types returns the singleton job types for the scheduler.
func Types(d Deps) []scheduler.Type {
	d.Options = d.Options.WithDefaults()
	// The metadata refresh sends the upstream's credential: no redirect
	// may take it to another origin.
	d.HTTP = credential.Client(d.HTTP, time.Minute)
	every := func(name string) time.Duration {
		if v, ok := d.Every[name]; ok && v > 0 {
			return v
		}
		return DefaultEvery[name]
	}
	if d.Metrics != nil {
		// The prune job counts every table it trims; each series exists
		// from the start, so whether a prune ran before a scrape does not
		// change the label set.
		for _, table := range store.PrunableTables {
			d.Metrics.PruneRowsRemoved.WithLabelValues(table)
		}
	}
	return []scheduler.Type{
		{Name: MetadataRefresh, Class: scheduler.Probe, Every: every(MetadataRefresh), Timeout: 2 * time.Minute,
			Handler: func(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) { return refreshModels(ctx, d) }},
		{Name: PriceCatalogFetch, Class: scheduler.Entity, Every: every(PriceCatalogFetch), Timeout: time.Minute,
			Handler: func(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) { return fetchCatalog(ctx, d) }},
		{Name: UsageRollup, Class: scheduler.Maintenance, Every: every(UsageRollup), Timeout: 5 * time.Minute,
			Handler: func(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) {
				// Recompute the last two hours: late events land in closed
				// buckets, and recomputation is idempotent.
				now := d.Clock.Now()
				n, err := d.Store.RollupUsage(ctx, now.Add(-2*time.Hour), now.Add(time.Hour))
				if err != nil {
					return "", fmt.Errorf("rollup: %w", err)
				}
				if n == 0 {
					return scheduler.OutcomeNoop, nil
				}
				return scheduler.OutcomeDone, nil
			}},
		{Name: Prune, Class: scheduler.Maintenance, Every: every(Prune), Timeout: 10 * time.Minute,
			Handler: func(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) {
				now := d.Clock.Now()
				keep := map[string]time.Duration{"request_events": d.Retention.RequestEvents, "audit_log": d.Retention.AuditLog, "upstream_affinity": d.Retention.UpstreamAffinity,
					"captured_exchanges": d.Retention.CapturedExchanges}
				total := int64(0)
				for _, table := range store.PrunableTables {
					n, err := d.Store.Prune(ctx, table, now.Add(-keep[table]))
					if err != nil {
						return "", fmt.Errorf("prune %s: %w", table, err)
					}
					if d.Metrics != nil {
						d.Metrics.PruneRowsRemoved.WithLabelValues(table).Add(float64(n))
					}
					total += n
				}
				if total == 0 {
					return scheduler.OutcomeNoop, nil
				}
				return scheduler.OutcomeDone, nil
			}},
	}
}
