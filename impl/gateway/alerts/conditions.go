// Package alerts notices the conditions operators are told about by
// webhook (an upstream credential unusable, an account's usage window
// high or forecast to run out, a principal's budget at 80 or 100 %, a
// replica behind the stored configuration) and enqueues one signed
// delivery per webhook when a condition starts firing and one when it
// resolves. The conditions are those of the shipped Prometheus rules
// (charts/proxy/alerts/proxy.rules.yaml), evaluated by the proxy itself
// for operators without an Alertmanager.
package alerts

import (
	"slices"
	"time"
)

// Conditions, each named after the rules file's alert it mirrors (Rules).
const (
	UpstreamCredentialUnusable     = "upstream_credential_unusable"
	UpstreamQuotaHigh              = "upstream_quota_high"
	UpstreamQuotaForecastExhausted = "upstream_quota_forecast_exhausted"
	PrincipalBudgetHigh            = "principal_budget_high"
	PrincipalBudgetExhausted       = "principal_budget_exhausted"
	ReplicaConfigBehind            = "replica_config_behind"
)

// Conditions lists every condition a webhook may subscribe to.
var Conditions = []string{UpstreamCredentialUnusable, UpstreamQuotaHigh, UpstreamQuotaForecastExhausted,
	PrincipalBudgetHigh, PrincipalBudgetExhausted, ReplicaConfigBehind}

// Rules names the alert of the rules file each condition mirrors.
var Rules = map[string]string{
	UpstreamCredentialUnusable:     "PillarUpstreamCredentialUnusable",
	UpstreamQuotaHigh:              "PillarUpstreamQuotaHigh",
	UpstreamQuotaForecastExhausted: "PillarUpstreamQuotaForecastExhausted",
	PrincipalBudgetHigh:            "PillarPrincipalBudgetHigh",
	PrincipalBudgetExhausted:       "PillarPrincipalBudgetExhausted",
	ReplicaConfigBehind:            "PillarReplicaConfigBehind",
}

// Known reports whether c is a condition.
func Known(c string) bool { return slices.Contains(Conditions, c) }

// Statuses of an Event.
const (
	StatusFiring   = "firing"
	StatusResolved = "resolved"
	// StatusTest marks a delivery asked for from the admin API.
	StatusTest = "test"
)

// Subject is what a condition is about.
type Subject struct {
	// Kind is upstream, principal or replica.
	Kind string `json:"kind"`
	ID   string `json:"id"`
	Name string `json:"name,omitempty"`
	// Window names an upstream's usage window (five_hour, seven_day).
	Window string `json:"window,omitempty"`
}

// Event is the JSON body a receiver gets, signed as it is sent.
type Event struct {
	Alert string `json:"alert"`
	// Rule is the rules file's alert of the same condition.
	Rule    string    `json:"rule,omitempty"`
	Status  string    `json:"status"`
	Episode int64     `json:"episode"`
	At      time.Time `json:"at"`
	Subject Subject   `json:"subject"`
	// Value is the measure that decided: a utilisation or budget ratio
	// (1: all of it), the forecast utilisation at reset, or the
	// generations behind.
	Value   *float64 `json:"value,omitempty"`
	Summary string   `json:"summary"`
	// Replica is the replica that noticed the change.
	Replica string `json:"replica"`
}

// observation is one condition's state for one subject at an evaluation.
type observation struct {
	condition string
	subject   Subject
	firing    bool
	value     float64
	summary   string
}

func (o observation) key() string { return keyOf(o.condition, o.subject) }

func keyOf(condition string, s Subject) string {
	k := condition + ":" + s.ID
	if s.Window != "" {
		k += ":" + s.Window
	}
	return k
}
