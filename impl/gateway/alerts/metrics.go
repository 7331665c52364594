package alerts

import "github.com/prometheus/client_golang/prometheus"

// Outcomes of svc_alert_webhook_deliveries_total.
const (
	OutcomeDelivered = "delivered"
	// OutcomeRetrying: the attempt failed and the scheduler retries it.
	OutcomeRetrying = "retrying"
	// OutcomeDeadLetter: the last attempt failed, or the receiver refused
	// it for good; the job stays in the scheduler's failures view.
	OutcomeDeadLetter = "dead_letter"
	// OutcomeDropped: the webhook was deleted or switched off meanwhile.
	OutcomeDropped = "dropped"
	// OutcomeNotEnqueued: the delivery job could not be enqueued.
	OutcomeNotEnqueued = "not_enqueued"
)

// Metrics are the alerts' series.
type Metrics struct {
	firing     *prometheus.GaugeVec
	changes    *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	// evaluations counts the evaluations this replica finished.
	evaluations prometheus.Counter
}

// NewMetrics registers the series on reg (nil: unregistered), every
// label value pre-set so that a dashboard sees zeros from the start.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		firing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svc_alert_conditions_firing",
			Help: "Subjects for which each alert condition fires, at this replica's last evaluation."}, []string{"condition"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_alert_notifications_total",
			Help: "Alert conditions starting to fire or resolving that this replica recorded and notified."}, []string{"condition", "status"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_alert_webhook_deliveries_total",
			Help: "Attempts to deliver an alert to a webhook, by outcome."}, []string{"outcome"}),
		evaluations: prometheus.NewCounter(prometheus.CounterOpts{Name: "svc_alert_evaluations_total",
			Help: "Evaluations of the alert conditions this replica ran."}),
	}
	for _, c := range Conditions {
		m.firing.WithLabelValues(c)
		m.changes.WithLabelValues(c, StatusFiring)
		m.changes.WithLabelValues(c, StatusResolved)
	}
	for _, o := range []string{OutcomeDelivered, OutcomeRetrying, OutcomeDeadLetter, OutcomeDropped, OutcomeNotEnqueued} {
		m.deliveries.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(m.firing, m.changes, m.deliveries, m.evaluations)
	}
	return m
}
