package scheduler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Statuses of svc_scheduler_jobs_total, as the seed lists them.
var jobStatuses = []string{"started", "done", "retry", "skip", "panicked", "noop"}

// Metrics are the seed's scheduler metrics. Label sets are registered up
// front (registered job types × statuses) so every series exists from start.
// A nil *Metrics records nothing.
type Metrics struct {
	Jobs                    *prometheus.CounterVec
	Duration                *prometheus.HistogramVec
	Failures                *prometheus.CounterVec
	InitFailure             prometheus.Gauge
	LazyRefreshTimeout      prometheus.Counter
	PruneRowsRemoved        *prometheus.CounterVec
	PriceCatalogStatus      *prometheus.CounterVec
	PromptCachePurgeRemoved prometheus.Counter
	MetadataRefreshStatus   *prometheus.CounterVec
}

// PruneTables are the tables the pruning job trims.
var PruneTables = []string{"request_events", "audit_log", "upstream_affinity"}

// NewMetrics registers the scheduler metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_scheduler_jobs_total", Help: "Scheduler job executions by job type and status.",
		}, []string{"job_type", "status"}),
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "svc_scheduler_job_duration_seconds", Help: "Duration of one job attempt.",
			// 11 bounds, 12 buckets with +Inf.
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10},
		}, []string{"job_type"}),
		Failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_scheduler_failures_total", Help: "Jobs that ended Failed (retry class exhausted or permanent error).",
		}, []string{"job_type"}),
		InitFailure: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "svc_scheduler_init_failure", Help: "1 when the scheduler failed to start on this replica.",
		}),
		LazyRefreshTimeout: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svc_scheduler_lazy_refresh_timeout_total", Help: "Request-path waits for a lazy credential refresh that timed out.",
		}),
		PruneRowsRemoved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_scheduler_prune_rows_removed_total", Help: "Rows removed by the pruning job by table.",
		}, []string{"table"}),
		PriceCatalogStatus: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_scheduler_price_catalog_status_total", Help: "Price catalog fetches by outcome.",
		}, []string{"status"}),
		PromptCachePurgeRemoved: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "svc_scheduler_prompt_cache_purge_rows_removed_total", Help: "Keep-alive rows removed by cleanup.",
		}),
		MetadataRefreshStatus: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "svc_scheduler_metadata_refresh_status_total", Help: "Metadata refreshes by outcome.",
		}, []string{"status"}),
	}
	reg.MustRegister(m.Jobs, m.Duration, m.Failures, m.InitFailure, m.LazyRefreshTimeout, m.PruneRowsRemoved,
		m.PriceCatalogStatus, m.PromptCachePurgeRemoved, m.MetadataRefreshStatus)
	for _, t := range PruneTables {
		m.PruneRowsRemoved.WithLabelValues(t)
	}
	for _, s := range []string{"applied", "noop"} {
		m.PriceCatalogStatus.WithLabelValues(s)
	}
	return m
}

func (m *Metrics) preRegister(types []string) {
	for _, t := range types {
		for _, s := range jobStatuses {
			m.Jobs.WithLabelValues(t, s)
		}
		m.Failures.WithLabelValues(t)
		m.Duration.WithLabelValues(t)
	}
}

func (m *Metrics) count(jobType, status string) {
	if m != nil {
		m.Jobs.WithLabelValues(jobType, status).Inc()
	}
}

func (m *Metrics) failed(jobType string) {
	if m != nil {
		m.Failures.WithLabelValues(jobType).Inc()
	}
}

func (m *Metrics) duration(jobType string, d time.Duration) {
	if m != nil {
		m.Duration.WithLabelValues(jobType).Observe(d.Seconds())
	}
}
