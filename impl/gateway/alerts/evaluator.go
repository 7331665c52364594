package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/gauges"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
	"github.com/pillarhq/pillar/impl/service"
)

// Snapshots gives the replica's current snapshot.
type Snapshots interface {
	Current() *snapshot.Snapshot
}

// Store is what the evaluator reads and records.
type Store interface {
	ConfigGeneration(ctx context.Context) (int64, error)
	GetQuota(ctx context.Context, upstreamID string) (*store.QuotaObservation, error)
	ListWebhooks(ctx context.Context) ([]store.Webhook, error)
	SetAlertState(ctx context.Context, key string, firing bool, at time.Time) (store.AlertState, bool, error)
	ListAlertStates(ctx context.Context) ([]store.AlertState, error)
}

// Budgets tells how full a principal's budgets are (limits.Limiter).
type Budgets interface {
	BudgetUsed(principal string, ls []limits.Limit) (float64, bool)
}

// Enqueuer enqueues durable jobs (scheduler.Scheduler).
type Enqueuer interface {
	Enqueue(ctx context.Context, e scheduler.Enqueue) (inserted bool, jobID int64, err error)
}

// Thresholds of the conditions; zero values take the rules file's.
type Thresholds struct {
	// QuotaHigh is the utilisation above which upstream_quota_high fires
	// (0.9).
	QuotaHigh float64
	// BudgetHigh is the budget share from which principal_budget_high
	// fires (0.8); principal_budget_exhausted fires at 1.
	BudgetHigh float64
	// ForecastSpan is how far back the 7-day trend looks (6 h);
	// ForecastMinSpan the least it must cover to forecast at all (30 min).
	ForecastSpan, ForecastMinSpan time.Duration
	// BehindGrace is how long a replica may lag the stored generation
	// before replica_config_behind fires (2 min).
	BehindGrace time.Duration
}

func (t *Thresholds) defaults() {
	if t.QuotaHigh == 0 {
		t.QuotaHigh = 0.9
	}
	if t.BudgetHigh == 0 {
		t.BudgetHigh = 0.8
	}
	if t.ForecastSpan == 0 {
		t.ForecastSpan = 6 * time.Hour
	}
	if t.ForecastMinSpan == 0 {
		t.ForecastMinSpan = 30 * time.Minute
	}
	if t.BehindGrace == 0 {
		t.BehindGrace = 2 * time.Minute
	}
}

// Evaluator evaluates the conditions on this replica's view. Every
// replica runs one; the episodes they record in the store decide which
// one notifies a change, so each change is notified once.
type Evaluator struct {
	service.Base
	snaps   Snapshots
	st      Store
	budgets Budgets
	queue   Enqueuer
	replica string
	metrics *Metrics
	th      Thresholds

	mu     sync.Mutex
	trends map[string]*trend
	// stored are readings of the stored generation, oldest first.
	stored []genReading
}

type genReading struct {
	at  time.Time
	gen int64
}

// Options configure an Evaluator.
type Options struct {
	Snapshots Snapshots
	Store     Store
	// Budgets may be nil: no budget conditions.
	Budgets   Budgets
	Queue     Enqueuer
	ReplicaID string
	// Logger (nil: discards) and Clock (nil: the real clock) go to
	// service.Init.
	Logger     *slog.Logger
	Clock      clock.Clock
	Metrics    *Metrics
	Thresholds Thresholds
}

// New returns an evaluator.
func New(o Options) *Evaluator {
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	o.Thresholds.defaults()
	return service.Init(service.Options{Logger: o.Logger, Clock: o.Clock}, &Evaluator{snaps: o.Snapshots, st: o.Store, budgets: o.Budgets,
		queue: o.Queue, replica: o.ReplicaID, metrics: o.Metrics, th: o.Thresholds, trends: map[string]*trend{}})
}

// Run evaluates every interval until ctx ends.
func (e *Evaluator) Run(ctx context.Context, interval time.Duration) {
	evaluate := func(ctx context.Context) {
		if err := e.Evaluate(ctx); err != nil && ctx.Err() == nil {
			e.Logger.Warn("alert evaluation incomplete", "err", err)
		}
	}
	evaluate(ctx)
	service.Every(ctx, e.Clock, interval, evaluate)
}

// Evaluate observes every condition once, records each change of state
// and enqueues its deliveries. A condition that could not be observed
// (its data unreadable, a forecast without a trend yet) keeps its state.
func (e *Evaluator) Evaluate(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer e.metrics.evaluations.Inc()
	now := e.Clock.Now()
	s := e.snaps.Current()
	if s == nil {
		return nil
	}
	obs, unknown, errs := e.observe(ctx, s, now)
	seen := map[string]bool{}
	firing := map[string]int{}
	var hooks []store.Webhook
	hooksRead := false
	for _, o := range obs {
		seen[o.key()] = true
		if o.firing {
			firing[o.condition]++
		}
		st, changed, err := e.st.SetAlertState(ctx, o.key(), o.firing, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !changed {
			continue
		}
		if !hooksRead {
			if hooks, err = e.st.ListWebhooks(ctx); err != nil {
				errs = append(errs, err)
			}
			hooksRead = true
		}
		e.notify(ctx, hooks, o, st, now)
	}
	for _, c := range Conditions {
		e.metrics.firing.WithLabelValues(c).Set(float64(firing[c]))
	}
	// A subject that is gone (an upstream deleted or switched off, a
	// principal without a budget now) resolves its episode. Replicas
	// resolve only their own lag.
	states, err := e.st.ListAlertStates(ctx)
	if err != nil {
		return join(append(errs, err))
	}
	for _, a := range states {
		cond, subj, _ := strings.Cut(a.Key, ":")
		if seen[a.Key] || unknown[cond] || (cond == ReplicaConfigBehind && subj != e.replica) || !Known(cond) {
			continue
		}
		st, changed, err := e.st.SetAlertState(ctx, a.Key, false, now)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if changed {
			if !hooksRead {
				if hooks, err = e.st.ListWebhooks(ctx); err != nil {
					errs = append(errs, err)
				}
				hooksRead = true
			}
			id, window, _ := strings.Cut(subj, ":")
			e.notify(ctx, hooks, observation{condition: cond, subject: Subject{Kind: subjectKind(cond), ID: id, Window: window},
				summary: "resolved: its " + subjectKind(cond) + " is no longer watched (deleted, switched off or without the limit)"}, st, now)
		}
	}
	return join(errs)
}

func join(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// observe returns the observations of s at now, the conditions that could
// not be observed in full (their missing subjects must not resolve), and
// the errors that kept them from it.
func (e *Evaluator) observe(ctx context.Context, s *snapshot.Snapshot, now time.Time) ([]observation, map[string]bool, []error) {
	var obs []observation
	unknown := map[string]bool{}
	var errs []error
	for _, u := range s.Upstreams {
		if !u.Enabled {
			continue
		}
		subj := Subject{Kind: "upstream", ID: u.ID, Name: u.Name}
		state := gauges.CredentialState(u, s.Errors[u.ID] != "")
		obs = append(obs, observation{condition: UpstreamCredentialUnusable, subject: subj, firing: state != gauges.StateOK,
			summary: fmt.Sprintf("upstream %s credential %s", u.Name, state)})
		if u.CredentialKind != credential.OAuth {
			continue
		}
		q, err := e.st.GetQuota(ctx, u.ID)
		if err == store.ErrNotFound {
			continue // never polled: nothing to tell
		}
		if err != nil {
			unknown[UpstreamQuotaHigh], unknown[UpstreamQuotaForecastExhausted] = true, true
			errs = append(errs, fmt.Errorf("usage of upstream %s: %w", u.ID, err))
			continue
		}
		for _, w := range []struct {
			name string
			win  store.QuotaWindow
		}{{"five_hour", q.FiveHour}, {"seven_day", q.SevenDay}} {
			ws := subj
			ws.Window = w.name
			r := w.win.Utilization / 100
			// A window past its reset no longer says how much is used.
			high := w.win.ResetsAt != nil && now.Before(*w.win.ResetsAt) && r > e.th.QuotaHigh
			obs = append(obs, observation{condition: UpstreamQuotaHigh, subject: ws, firing: high, value: r,
				summary: fmt.Sprintf("upstream %s has used %.0f%% of its %s window", u.Name, w.win.Utilization, w.name)})
		}
		if o, ok := e.forecast(u, q, now); ok {
			obs = append(obs, o)
		} else if e.trends[u.ID] != nil && len(e.trends[u.ID].samples) > 0 {
			// Sampling, no trend yet: another replica may have one.
			unknown[UpstreamQuotaForecastExhausted] = true
		}
	}
	if e.budgets != nil {
		for _, p := range s.Principals() {
			if !p.Enabled {
				continue
			}
			r, ok := e.budgets.BudgetUsed(p.ID, p.Limits)
			if !ok {
				continue
			}
			subj := Subject{Kind: "principal", ID: p.ID, Name: p.Name}
			sum := fmt.Sprintf("principal %s has spent %.0f%% of its budget", p.Name, r*100)
			obs = append(obs,
				observation{condition: PrincipalBudgetHigh, subject: subj, firing: r >= e.th.BudgetHigh && r < 1, value: r, summary: sum},
				observation{condition: PrincipalBudgetExhausted, subject: subj, firing: r >= 1, value: r, summary: sum})
		}
	}
	if o, ok, err := e.behind(ctx, s, now); err != nil {
		unknown[ReplicaConfigBehind] = true
		errs = append(errs, err)
	} else if ok {
		obs = append(obs, o)
	} else {
		unknown[ReplicaConfigBehind] = true
	}
	return obs, unknown, errs
}

// forecast observes upstream_quota_forecast_exhausted for u: ok is false
// while the samples show no trend yet.
func (e *Evaluator) forecast(u *snapshot.Upstream, q *store.QuotaObservation, now time.Time) (observation, bool) {
	w := q.SevenDay
	if w.ResetsAt == nil || !now.Before(*w.ResetsAt) {
		delete(e.trends, u.ID)
		return observation{}, false
	}
	t := e.trends[u.ID]
	if t == nil {
		t = &trend{}
		e.trends[u.ID] = t
	}
	t.add(sample{at: q.ObservedAt, util: w.Utilization}, *w.ResetsAt, e.th.ForecastSpan)
	at, ok := t.forecast(e.th.ForecastMinSpan)
	if !ok {
		return observation{}, false
	}
	return observation{condition: UpstreamQuotaForecastExhausted, subject: Subject{Kind: "upstream", ID: u.ID, Name: u.Name, Window: "seven_day"},
		firing: at >= 100, value: at / 100,
		summary: fmt.Sprintf("upstream %s is forecast to reach %.0f%% of its 7-day window when it resets at %s", u.Name, at, w.ResetsAt.UTC().Format(time.RFC3339))}, true
}

// behind observes replica_config_behind: this replica's snapshot against
// the generation stored BehindGrace ago, so that a change made a moment
// ago does not count. ok is false until a reading is that old.
func (e *Evaluator) behind(ctx context.Context, s *snapshot.Snapshot, now time.Time) (observation, bool, error) {
	gen, err := e.st.ConfigGeneration(ctx)
	if err != nil {
		return observation{}, false, fmt.Errorf("stored generation: %w", err)
	}
	e.stored = append(e.stored, genReading{now, gen})
	// The newest reading at least BehindGrace old decides; older ones
	// are no longer needed.
	ref := -1
	for i, r := range e.stored {
		if now.Sub(r.at) >= e.th.BehindGrace {
			ref = i
		}
	}
	if ref < 0 {
		return observation{}, false, nil
	}
	e.stored = e.stored[ref:]
	r := e.stored[0]
	lag := float64(r.gen - s.Generation)
	return observation{condition: ReplicaConfigBehind, subject: Subject{Kind: "replica", ID: e.replica}, firing: s.Generation < r.gen, value: lag,
		summary: fmt.Sprintf("replica %s serves configuration generation %d, the database held %d at %s", e.replica, s.Generation, r.gen, r.at.UTC().Format(time.RFC3339))}, true, nil
}

// notify enqueues the change st of o to every enabled webhook that
// subscribes to o's condition, under a key naming the webhook and the
// episode's change, so that it is delivered once.
func (e *Evaluator) notify(ctx context.Context, hooks []store.Webhook, o observation, st store.AlertState, now time.Time) {
	status := StatusResolved
	if st.Firing {
		status = StatusFiring
	}
	e.metrics.changes.WithLabelValues(o.condition, status).Inc()
	ev := Event{Alert: o.condition, Rule: Rules[o.condition], Status: status, Episode: st.Episode, At: now.UTC(), Subject: o.subject,
		Summary: o.summary, Replica: e.replica}
	if !strings.HasPrefix(o.summary, "resolved:") {
		v := o.value
		ev.Value = &v
	}
	body, _ := json.Marshal(ev)
	for _, h := range hooks {
		if !h.Enabled || (len(h.Conditions) > 0 && !slices.Contains(h.Conditions, o.condition)) {
			continue
		}
		p, _ := json.Marshal(webhook.Payload{WebhookID: h.ID, Event: body})
		key := fmt.Sprintf("%s:%s:%d:%s", h.ID, st.Key, st.Episode, status)
		if _, _, err := e.queue.Enqueue(ctx, scheduler.Enqueue{Type: webhook.JobType, IdempotencyKey: key, Payload: p}); err != nil {
			e.metrics.deliveries.WithLabelValues(OutcomeNotEnqueued).Inc()
			e.Logger.Error("alert delivery not enqueued", "webhook", h.ID, "alert", st.Key, "status", status, "err", err)
		}
	}
}

// subjectKind is the kind of subject of a condition.
func subjectKind(cond string) string {
	k, _, _ := strings.Cut(cond, "_")
	return k
}
