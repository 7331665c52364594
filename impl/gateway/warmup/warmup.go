// Package warmup keeps the five-hour usage window of subscription (OAuth)
// upstreams open: a warm-up attempt sends a one-token request when no
// window is active, records the cycle it opened, and schedules the next
// attempt for when that window ends. A watchdog recreates missing work.
//
// Events are logged with target=warmup (docs/warmup.md lists their fields
// and the values of reason, status and outcome).
package warmup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/oauth"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Job types.
const (
	JobType      = "adaptive:warmup"
	WatchdogType = "warmup_watchdog"
)

// Outcomes of an attempt, as logged in dispatch_result and skip events.
const (
	OutcomeWarmed            = "warmed"
	OutcomeWindowActive      = "window_already_active"
	OutcomeSevenDayExhausted = "seven_day_quota_exhausted"
	OutcomeRateLimited       = "rate_limited"
	OutcomeRetryable         = "retryable_error"
	OutcomePermanent         = "permanent_failure"
	// OutcomeRefreshRefused: the provider refused the credential's refresh
	// grant; the revoked token is never sent, and no attempt is queued
	// until the OAuth flow is run again (a new credential).
	OutcomeRefreshRefused = "refresh_refused"
)

// Reasons a cycle is abandoned.
const (
	ReasonMissingObservations = "missing_observations"
	ReasonPermanentFailure    = "permanent_failure"
)

// Key is the idempotency key of the attempt of upstreamID due at at (unix
// seconds): adaptive:warmup:{upstream_id}:{reset}. All attempts of an
// upstream share the family prefix FamilyPrefix.
func Key(upstreamID string, at int64) string {
	return fmt.Sprintf("%s%d", FamilyPrefix(upstreamID), at)
}

// FamilyPrefix is the cycle-key family of an upstream's attempts.
func FamilyPrefix(upstreamID string) string { return JobType + ":" + upstreamID + ":" }

// Jitter is the stable per-upstream offset (30 to 59 seconds) added to a
// reset before the next attempt, so upstreams resetting together do not
// all call at once and one upstream always picks the same moment.
func Jitter(upstreamID string) time.Duration {
	h := fnv.New32a()
	h.Write([]byte(upstreamID))
	return time.Duration(30+h.Sum32()%30) * time.Second
}

// Tokens opens an upstream's OAuth token.
type Tokens interface {
	Token(u *store.Upstream) (*oauth.Token, error)
}

// Enqueuer puts durable jobs in the scheduler and lists a family's jobs.
type Enqueuer interface {
	Enqueue(ctx context.Context, e scheduler.Enqueue) (bool, int64, error)
	Family(ctx context.Context, jobType, prefix string) ([]scheduler.JobInfo, error)
}

// Shaper lets a warm-up dialect plugin reshape the request of an upstream.
type Shaper func(ctx context.Context, pluginID string, u *store.Upstream, body []byte, header http.Header) ([]byte, error)

// Warmer runs warm-up attempts and the watchdog.
type Warmer struct {
	Store  store.Store
	Tokens Tokens
	Jobs   Enqueuer
	HTTP   *http.Client
	// Base's Logger gets the warm-up events, each with target=warmup.
	service.Base
	// Model is the small model of the one-token request.
	Model string
	// FreshFor is how old a usage observation may be and still decide an
	// attempt without asking the provider.
	FreshFor time.Duration
	// Shape applies a warm-up dialect plugin, when the upstream binds one.
	Shape Shaper
	// Failpoint, when set, is called at named points of an attempt; tests
	// of crash behaviour make it end the process ("after_dispatch").
	Failpoint func(name string)
}

// DefaultModel is the small model warm-ups use.
const DefaultModel = "claude-haiku-4-5"

// target marks every warm-up event, which the seed's log queries select by.
var target = slog.String("target", "warmup")

// Types are the scheduler types: attempts are entity jobs of the Entity
// retry class; the watchdog is a periodic singleton.
func (w *Warmer) Types(watchdogEvery time.Duration) []scheduler.Type {
	return []scheduler.Type{
		{Name: JobType, Class: scheduler.Entity, Timeout: time.Minute, Handler: w.attempt},
		{Name: WatchdogType, Class: scheduler.Maintenance, Every: watchdogEvery, Timeout: time.Minute, Handler: w.watchdog},
	}
}

type payload struct {
	UpstreamID string `json:"upstream_id"`
}

// Eligible is warm-up rule 1: only vendor_oauth upstreams holding OAuth
// credentials, enabled and with warm-up on, are ever warmed; and not one
// whose refresh grant the provider refused, whose token is revoked.
func Eligible(u *store.Upstream) bool {
	return u.Kind == store.KindVendorOAuth && u.CredentialKind == credential.OAuth && len(u.Credential) > 0 && u.Enabled && u.WarmupEnabled &&
		!u.Status.RefreshRefused
}

// Immediate enqueues an attempt due now under a new key (OAuth completed,
// warm-up enabled, or the watchdog found none).
func (w *Warmer) Immediate(ctx context.Context, upstreamID string) error {
	_, err := w.enqueue(ctx, upstreamID, w.Clock.Now())
	return err
}

func (w *Warmer) enqueue(ctx context.Context, upstreamID string, at time.Time) (bool, error) {
	p, _ := json.Marshal(payload{UpstreamID: upstreamID})
	ins, _, err := w.Jobs.Enqueue(ctx, scheduler.Enqueue{Type: JobType, IdempotencyKey: Key(upstreamID, at.Unix()), Payload: p, RunAt: at})
	return ins, err
}

// attempt is one warm-up attempt (the seed's warm-up attempt state table).
func (w *Warmer) attempt(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) {
	var p payload
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.UpstreamID == "" {
		return "", fmt.Errorf("warm-up payload: %w", scheduler.ErrPermanent)
	}
	u, err := w.Store.GetUpstream(ctx, p.UpstreamID)
	if errors.Is(err, store.ErrNotFound) {
		return scheduler.OutcomeNoop, nil
	}
	if err != nil {
		return "", err
	}
	if !Eligible(u) {
		if u.Status.RefreshRefused && u.Enabled && u.WarmupEnabled {
			w.Logger.Info("attempt_skipped", target, "upstream_id", u.ID, "action", "attempt_skipped", "outcome", OutcomeRefreshRefused)
		}
		return scheduler.OutcomeNoop, nil
	}
	// One warm-up per upstream at a time: River gives one worker per job,
	// the lease one job per upstream. A retry of the same job owns it.
	owner := "job:" + strconv.FormatInt(j.ID, 10)
	now := w.Clock.Now()
	ok, err := w.Store.AcquireWarmupLease(ctx, u.ID, owner, now.Add(2*time.Minute), now)
	if err != nil {
		return "", err
	}
	if !ok {
		w.Logger.Info("attempt_skipped", target, "upstream_id", u.ID, "action", "attempt_skipped", "outcome", "lease_held")
		return scheduler.OutcomeSkip, nil
	}
	defer func() { _ = w.Store.ReleaseWarmupLease(context.WithoutCancel(ctx), u.ID, owner) }()

	fresh := w.freshObservation(ctx, u, now)
	if fresh != nil {
		if fresh.SevenDay.Exhausted(now) {
			return w.sevenDayExhausted(ctx, u, *fresh.SevenDay.ResetsAt, false)
		}
		if fresh.FiveHour.Active(now) {
			w.Logger.Info("attempt_skipped", target, "upstream_id", u.ID, "action", "attempt_skipped", "outcome", OutcomeWindowActive)
			w.scheduleAfter(ctx, u.ID, *fresh.FiveHour.ResetsAt)
			return scheduler.OutcomeSkip, nil
		}
	}
	return w.dispatch(ctx, j, u)
}

// freshObservation returns the usage observation when it can decide the
// attempt: taken with the current credential and recently enough.
func (w *Warmer) freshObservation(ctx context.Context, u *store.Upstream, now time.Time) *store.QuotaObservation {
	q, err := w.Store.GetQuota(ctx, u.ID)
	if err != nil || q.CredentialVersion != u.CredentialVersion {
		return nil
	}
	fresh := w.FreshFor
	if fresh <= 0 {
		fresh = 10 * time.Minute
	}
	if now.Sub(q.ObservedAt) > fresh {
		return nil
	}
	return q
}

// sevenDayExhausted records the reset cycle and schedules the next attempt
// at the seven-day reset plus the upstream's jitter; the upstream is not
// stamped as warmed.
func (w *Warmer) sevenDayExhausted(ctx context.Context, u *store.Upstream, reset time.Time, dispatched bool) (scheduler.Outcome, error) {
	cycle := fmt.Sprintf("7d:%d", reset.Unix())
	if err := w.Store.RecordResetCycleKey(ctx, u.ID, cycle, w.Clock.Now()); err != nil {
		return "", err
	}
	if !dispatched {
		w.Logger.Info("attempt_skipped", target, "upstream_id", u.ID, "action", "attempt_skipped", "outcome", OutcomeSevenDayExhausted, "reset_cycle_key", cycle)
	}
	w.scheduleAfter(ctx, u.ID, reset)
	return scheduler.OutcomeSkip, nil
}

// scheduleAfter enqueues the attempt for a window that ends at reset.
func (w *Warmer) scheduleAfter(ctx context.Context, upstreamID string, reset time.Time) {
	at := reset.Add(Jitter(upstreamID))
	p, _ := json.Marshal(payload{UpstreamID: upstreamID})
	if _, _, err := w.Jobs.Enqueue(ctx, scheduler.Enqueue{Type: JobType, IdempotencyKey: Key(upstreamID, reset.Unix()), Payload: p, RunAt: at}); err != nil {
		w.Logger.Warn("schedule next warm-up", target, "upstream_id", upstreamID, "error", err)
	}
}

// dispatch sends the one-token request and classifies the answer.
func (w *Warmer) dispatch(ctx context.Context, j scheduler.Job, u *store.Upstream) (scheduler.Outcome, error) {
	log := w.Logger.With(target)
	tok, err := w.Tokens.Token(u)
	if err != nil {
		log.Warn("cycle_abandoned", "upstream_id", u.ID, "action", "cycle_abandoned", "reason", ReasonPermanentFailure, "error", err.Error())
		return "", fmt.Errorf("%v: %w", err, scheduler.ErrPermanent)
	}
	model := w.Model
	if model == "" {
		model = DefaultModel
	}
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 1,
		"messages": []map[string]string{{"role": "user", "content": "hi"}}})
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("anthropic-version", "2023-06-01")
	if u.WarmupDialectPlugin != nil && w.Shape != nil {
		if body, err = w.Shape(ctx, *u.WarmupDialectPlugin, u, body, h); err != nil {
			log.Warn("cycle_abandoned", "upstream_id", u.ID, "action", "cycle_abandoned", "reason", ReasonPermanentFailure, "error", "warm-up dialect plugin: "+err.Error())
			return "", fmt.Errorf("warm-up dialect plugin: %v: %w", err, scheduler.ErrPermanent)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(u.BaseURL, "/")+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return "", fmt.Errorf("%v: %w", err, scheduler.ErrPermanent)
	}
	req.Header = h
	// The warm-up sends the OAuth beta alone, replacing any a dialect set.
	req.Header.Del("Anthropic-Beta")
	credential.Set(req.Header, credential.OAuth, tok.AccessToken)

	log.Info("dispatch_start", "upstream_id", u.ID, "action", "dispatch_start")
	resp, err := credential.Client(w.HTTP, 30*time.Second).Do(req)
	if err != nil {
		log.Warn("dispatch_result", "upstream_id", u.ID, "action", "dispatch_result", "status", 0, "outcome", OutcomeRetryable)
		return w.retry(j, u, fmt.Errorf("warm-up request: %s", transportError(err)))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if w.Failpoint != nil {
		w.Failpoint("after_dispatch")
	}
	obs := unifiedHeaders(resp.Header)
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode <= 299:
		if obs.fiveHourReset.IsZero() {
			log.Info("dispatch_result", "upstream_id", u.ID, "action", "dispatch_result", "status", resp.StatusCode, "outcome", OutcomeWarmed)
			log.Warn("cycle_abandoned", "upstream_id", u.ID, "action", "cycle_abandoned", "reason", ReasonMissingObservations)
			return scheduler.OutcomeDone, nil
		}
		log.Info("dispatch_result", "upstream_id", u.ID, "action", "dispatch_result", "status", resp.StatusCode, "outcome", OutcomeWarmed)
		cycle := fmt.Sprintf("5h:%d", obs.fiveHourReset.Unix())
		written, err := w.Store.WriteCycleKey(ctx, u.ID, cycle, w.Clock.Now())
		if err != nil {
			return "", err
		}
		if written {
			log.Info("cycle_key_written", "upstream_id", u.ID, "action", "cycle_key_written", "cycle_key", cycle)
		}
		w.scheduleAfter(ctx, u.ID, obs.fiveHourReset)
		return scheduler.OutcomeDone, nil
	case resp.StatusCode == http.StatusTooManyRequests:
		if obs.sevenDayUtil >= 1 && !obs.sevenDayReset.IsZero() {
			log.Info("dispatch_result", "upstream_id", u.ID, "action", "dispatch_result", "status", resp.StatusCode, "outcome", OutcomeSevenDayExhausted)
			return w.sevenDayExhausted(ctx, u, obs.sevenDayReset, true)
		}
		log.Info("dispatch_result", "upstream_id", u.ID, "action", "dispatch_result", "status", resp.StatusCode, "outcome", OutcomeRateLimited)
		if !obs.fiveHourReset.IsZero() {
			// The window is open (and full): the next cycle starts when it ends.
			w.scheduleAfter(ctx, u.ID, obs.fiveHourReset)
			return scheduler.OutcomeSkip, nil
		}
		return w.retry(j, u, errors.New("warm-up request rate limited without window observations"))
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout:
		log.Warn("dispatch_result", "upstream_id", u.ID, "action", "dispatch_result", "status", resp.StatusCode, "outcome", OutcomePermanent)
		log.Warn("cycle_abandoned", "upstream_id", u.ID, "action", "cycle_abandoned", "reason", ReasonPermanentFailure,
			"error", "provider answered "+strconv.Itoa(resp.StatusCode))
		return "", fmt.Errorf("warm-up request refused with %d: %w", resp.StatusCode, scheduler.ErrPermanent)
	default:
		log.Warn("dispatch_result", "upstream_id", u.ID, "action", "dispatch_result", "status", resp.StatusCode, "outcome", OutcomeRetryable)
		return w.retry(j, u, fmt.Errorf("warm-up request answered %d", resp.StatusCode))
	}
}

// retry fails the attempt for the retry class; the last attempt abandons
// the cycle.
func (w *Warmer) retry(j scheduler.Job, u *store.Upstream, err error) (scheduler.Outcome, error) {
	if j.Attempt >= j.MaxAttempts {
		w.Logger.Warn("cycle_abandoned", target, "upstream_id", u.ID, "action", "cycle_abandoned", "reason", ReasonPermanentFailure, "error", err.Error())
	}
	return "", err
}

// transportError keeps a transport failure's kind, not its URL.
func transportError(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}

type unified struct {
	fiveHourReset, sevenDayReset time.Time
	fiveHourUtil, sevenDayUtil   float64
}

// unifiedHeaders reads the provider's unified rate-limit headers.
func unifiedHeaders(h http.Header) unified {
	var u unified
	unix := func(name string) time.Time {
		if v, err := strconv.ParseInt(h.Get(name), 10, 64); err == nil && v > 0 {
			return time.Unix(v, 0).UTC()
		}
		return time.Time{}
	}
	frac := func(name string) float64 {
		v, _ := strconv.ParseFloat(h.Get(name), 64)
		return v
	}
	u.fiveHourReset = unix("anthropic-ratelimit-unified-5h-reset")
	u.sevenDayReset = unix("anthropic-ratelimit-unified-7d-reset")
	u.fiveHourUtil = frac("anthropic-ratelimit-unified-5h-utilization")
	u.sevenDayUtil = frac("anthropic-ratelimit-unified-7d-utilization")
	return u
}

// watchdog enqueues an immediate attempt for every eligible upstream whose
// cycle-key family has no live task. A pending, queued, running or
// retryable task counts as live even when due in the future (it is never
// pulled forward); a family whose tasks all ended (dead-lettered, or done
// without a successor) gets new work under a new key.
func (w *Warmer) watchdog(ctx context.Context, _ scheduler.Job) (scheduler.Outcome, error) {
	us, err := w.Store.ListUpstreams(ctx)
	if err != nil {
		return "", err
	}
	created := 0
	for i := range us {
		u := &us[i]
		if !Eligible(u) {
			continue
		}
		fam, err := w.Jobs.Family(ctx, JobType, FamilyPrefix(u.ID))
		if err != nil {
			return "", err
		}
		live := false
		for _, j := range fam {
			if j.Active() {
				live = true
				break
			}
		}
		if live {
			continue
		}
		ins, err := w.enqueue(ctx, u.ID, w.Clock.Now())
		if err != nil {
			return "", err
		}
		if ins {
			created++
			w.Logger.Info("watchdog_enqueued", target, "upstream_id", u.ID, "action", "watchdog_enqueued")
		}
	}
	if created == 0 {
		return scheduler.OutcomeNoop, nil
	}
	return scheduler.OutcomeDone, nil
}
