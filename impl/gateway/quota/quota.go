// Package quota observes the usage windows of subscription (OAuth)
// upstreams and claims their limit-reset coupons.
//
// The usage poll asks the provider once per upstream per poll; one answer
// carries the quota windows, extra usage and the reset-coupon status. A
// claim checks the live account identity, takes a durable fence atomically
// and sends one POST; the fence keeps overlapping claims out and keeps an
// older poll response from restoring a consumed coupon. An unresolved fence
// (the claim's answer was lost) is recovered only by a poll made five
// minutes later; the POST is never repeated.
package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/oauth"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Job types.
const (
	PollJob      = "usage_poll"
	PollOneJob   = "usage_poll_upstream"
	QuotaGCJob   = "quota_gc"
	RecoverAfter = 5 * time.Minute
)

// Claim errors; the admin API maps each to a stable code.
var (
	ErrNoCoupon         = errors.New("no usable reset coupon is advertised for this upstream")
	ErrAccountMismatch  = errors.New("the credential now belongs to another account than the observed coupon")
	ErrClaimInProgress  = errors.New("another claim holds the coupon's fence")
	ErrClaimRejected    = errors.New("the provider refused the claim")
	ErrOutcomeUnknown   = errors.New("the claim's outcome is unknown")
	ErrProviderUnusable = errors.New("the provider could not be asked")
)

// Tokens opens an upstream's OAuth token.
type Tokens interface {
	Token(u *store.Upstream) (*oauth.Token, error)
}

// Enqueuer puts a durable job in the scheduler.
type Enqueuer interface {
	Enqueue(ctx context.Context, e scheduler.Enqueue) (bool, int64, error)
}

// Service polls usage and claims coupons.
type Service struct {
	Store  store.Store
	Tokens Tokens
	Client *oauth.Client
	Jobs   Enqueuer
	service.Base
	// StaleAfter is the age past which an observation advertises no coupon
	// and no longer decides a warm-up.
	StaleAfter time.Duration
	// Metrics counts quota GC removals (optional).
	OnGC func(store.QuotaGC)

	// polling serializes the polls of one upstream in this process (by a
	// stripe of its id): a credential's first poll and the periodic tick
	// can be due at once, and both would resolve the identity (P-USAGE-3).
	// Two replicas running those two jobs at once can still both resolve
	// it: one profile request too many, the same identity stored.
	polling [16]sync.Mutex
}

func (s *Service) staleAfter() time.Duration {
	if s.StaleAfter > 0 {
		return s.StaleAfter
	}
	return 15 * time.Minute
}

// Types registers the poll sweep (periodic), the per-upstream poll and the
// quota garbage collection.
func (s *Service) Types(pollEvery, gcEvery time.Duration) []scheduler.Type {
	return []scheduler.Type{
		{Name: PollJob, Class: scheduler.Maintenance, Every: pollEvery, Timeout: time.Minute, Handler: s.sweep},
		{Name: PollOneJob, Class: scheduler.Probe, Timeout: time.Minute, Handler: s.pollOne},
		{Name: QuotaGCJob, Class: scheduler.Maintenance, Every: gcEvery, Timeout: time.Minute, Handler: s.gc},
	}
}

type pollPayload struct {
	UpstreamID string `json:"upstream_id"`
}

// pollable: connected OAuth upstreams (enabled or not: an operator may want
// to see a disabled upstream's windows before enabling it), except one
// whose refresh grant the provider refused: its token is revoked, and
// sending it again would only be refused.
func pollable(u *store.Upstream) bool {
	return u.Kind == store.KindVendorOAuth && u.CredentialKind == credential.OAuth && len(u.Credential) > 0 && !u.Status.RefreshRefused
}

// sweep enqueues one poll per connected upstream for this tick.
func (s *Service) sweep(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) {
	us, err := s.Store.ListUpstreams(ctx)
	if err != nil {
		return "", err
	}
	n := 0
	for i := range us {
		if !pollable(&us[i]) {
			continue
		}
		if err := s.EnqueuePoll(ctx, us[i].ID, j.IdempotencyKey); err != nil {
			return "", err
		}
		n++
	}
	if n == 0 {
		return scheduler.OutcomeNoop, nil
	}
	return scheduler.OutcomeDone, nil
}

// EnqueuePoll asks for one poll of an upstream; reason makes the key (a
// sweep tick, a claim's fence, a new credential version).
func (s *Service) EnqueuePoll(ctx context.Context, upstreamID, reason string) error {
	p, _ := json.Marshal(pollPayload{UpstreamID: upstreamID})
	_, _, err := s.Jobs.Enqueue(ctx, scheduler.Enqueue{Type: PollOneJob, IdempotencyKey: PollOneJob + ":" + upstreamID + ":" + reason, Payload: p})
	return err
}

func (s *Service) pollOne(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) {
	var p pollPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.UpstreamID == "" {
		return "", fmt.Errorf("poll payload: %w", scheduler.ErrPermanent)
	}
	applied, err := s.Poll(ctx, p.UpstreamID)
	if err != nil {
		if oauth.IsPermanent(err) || errors.Is(err, oauth.ErrNoCredential) {
			return "", fmt.Errorf("%v: %w", err, scheduler.ErrPermanent)
		}
		return "", err
	}
	if !applied {
		return scheduler.OutcomeNoop, nil
	}
	return scheduler.OutcomeDone, nil
}

// Poll observes one upstream: one usage request, plus the account identity
// once per credential version when coupon data is present.
func (s *Service) Poll(ctx context.Context, upstreamID string) (applied bool, err error) {
	h := fnv.New32a()
	h.Write([]byte(upstreamID))
	mu := &s.polling[h.Sum32()%uint32(len(s.polling))]
	mu.Lock()
	defer mu.Unlock()
	u, err := s.Store.GetUpstream(ctx, upstreamID)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !pollable(u) {
		if u.Status.RefreshRefused {
			s.Logger.Info("usage poll skipped: the provider refused the refresh grant; run the OAuth flow again", "upstream_id", u.ID)
		}
		return false, nil
	}
	tok, err := s.Tokens.Token(u)
	if err != nil {
		return false, err
	}
	polledAt := s.Clock.Now()
	usage, err := s.Client.Usage(ctx, u.BaseURL, tok.AccessToken)
	if err != nil {
		return false, err
	}
	obs := store.QuotaObservation{UpstreamID: u.ID, CredentialVersion: u.CredentialVersion, PolledAt: polledAt, ObservedAt: s.Clock.Now(),
		ExtraUsage: usage.ExtraUsage}
	if usage.FiveHour != nil {
		obs.FiveHour = store.QuotaWindow{Utilization: usage.FiveHour.Utilization, ResetsAt: usage.FiveHour.ResetsAt}
	}
	if usage.SevenDay != nil {
		obs.SevenDay = store.QuotaWindow{Utilization: usage.SevenDay.Utilization, ResetsAt: usage.SevenDay.ResetsAt}
	}
	if c := usage.Coupon; c != nil {
		obs.CouponReported = true
		obs.CouponAvailable = c.Available && c.CouponID != nil && *c.CouponID != ""
		if c.CouponID != nil {
			obs.CouponID = *c.CouponID
		}
		obs.CouponExpiresAt = c.ExpiresAt
		prev, err := s.Store.GetQuota(ctx, u.ID)
		if err != nil || prev.IdentityVersion != u.CredentialVersion || prev.AccountUUID == "" {
			prof, err := s.Client.Profile(ctx, u.BaseURL, tok.AccessToken)
			if err != nil {
				return false, err
			}
			obs.AccountUUID, obs.IdentityVersion = prof.AccountUUID, u.CredentialVersion
		}
	}
	applied, err = s.Store.PutQuota(ctx, obs, RecoverAfter)
	if err != nil {
		return false, err
	}
	if !applied {
		s.Logger.Info("usage observation discarded: the poll predates a resolved coupon claim", "upstream_id", u.ID)
	}
	return applied, nil
}

// View is the limit-reset observation the admin API serves.
type View struct {
	Observation *store.QuotaObservation
	// Stale: too old, or taken with a replaced credential.
	Stale bool
	// Usable: a coupon may be claimed now.
	Usable bool
}

// Observe reads the stored observation; it never contacts the provider.
func (s *Service) Observe(ctx context.Context, u *store.Upstream) (*View, error) {
	q, err := s.Store.GetQuota(ctx, u.ID)
	if errors.Is(err, store.ErrNotFound) {
		return &View{}, nil
	}
	if err != nil {
		return nil, err
	}
	v := &View{Observation: q}
	now := s.Clock.Now()
	v.Stale = q.CredentialVersion != u.CredentialVersion || now.Sub(q.ObservedAt) > s.staleAfter()
	expired := q.CouponExpiresAt != nil && !q.CouponExpiresAt.After(now)
	v.Usable = !v.Stale && q.CouponAvailable && q.CouponID != "" && q.Fence == nil && !expired && pollable(u)
	return v, nil
}

// Claim claims the advertised coupon of an upstream.
func (s *Service) Claim(ctx context.Context, upstreamID string) (*View, error) {
	u, err := s.Store.GetUpstream(ctx, upstreamID)
	if err != nil {
		return nil, err
	}
	v, err := s.Observe(ctx, u)
	if err != nil {
		return nil, err
	}
	if u.Status.RefreshRefused {
		return v, oauth.ErrRefreshRefused
	}
	if !v.Usable {
		return v, ErrNoCoupon
	}
	q := v.Observation
	tok, err := s.Tokens.Token(u)
	if err != nil {
		return v, err
	}
	// The live identity must still be the account the coupon was seen on.
	prof, err := s.Client.Profile(ctx, u.BaseURL, tok.AccessToken)
	if err != nil {
		return v, fmt.Errorf("%w: %v", ErrProviderUnusable, err)
	}
	if q.AccountUUID == "" || prof.AccountUUID != q.AccountUUID {
		return v, ErrAccountMismatch
	}
	fence, err := s.Store.AcquireCouponFence(ctx, u.ID, q.CouponID, u.CredentialVersion, s.Clock.Now())
	if errors.Is(err, store.ErrConflict) {
		return v, ErrClaimInProgress
	}
	if err != nil {
		return v, err
	}
	s.Logger.Info("coupon claim sent", "upstream_id", u.ID, "fence_id", fence)
	claimErr := s.Client.ClaimReset(ctx, u.BaseURL, tok.AccessToken, q.CouponID)
	var pe *oauth.ProviderError
	switch {
	case claimErr == nil:
		if err := s.Store.ResolveCouponFence(context.WithoutCancel(ctx), u.ID, fence, store.FenceConsumed, s.Clock.Now()); err != nil {
			s.Logger.Warn("resolve coupon fence", "upstream_id", u.ID, "error", err)
		}
		s.Logger.Info("coupon claimed; windows reset", "upstream_id", u.ID)
		if err := s.EnqueuePoll(context.WithoutCancel(ctx), u.ID, "claim:"+fence); err != nil {
			s.Logger.Warn("queue usage poll after claim", "upstream_id", u.ID, "error", err)
		}
	case errors.As(claimErr, &pe) && pe.Permanent():
		_ = s.Store.ResolveCouponFence(context.WithoutCancel(ctx), u.ID, fence, store.FenceRejected, s.Clock.Now())
		_ = s.EnqueuePoll(context.WithoutCancel(ctx), u.ID, "claim:"+fence)
		s.Logger.Warn("coupon claim refused", "upstream_id", u.ID, "status", pe.Status, "code", pe.Code)
		return s.reobserve(ctx, u, v), fmt.Errorf("%w: %v", ErrClaimRejected, claimErr)
	default:
		// No answer, or a server error: the provider may have applied it.
		// The fence stays until a poll five minutes on sees fresh state.
		s.Logger.Warn("coupon claim outcome unknown; the fence is recovered by a later poll", "upstream_id", u.ID, "error", claimErr)
		return s.reobserve(ctx, u, v), fmt.Errorf("%w: %v", ErrOutcomeUnknown, claimErr)
	}
	return s.reobserve(ctx, u, v), nil
}

func (s *Service) reobserve(ctx context.Context, u *store.Upstream, fallback *View) *View {
	if v, err := s.Observe(context.WithoutCancel(ctx), u); err == nil {
		return v
	}
	return fallback
}

func (s *Service) gc(ctx context.Context, _ scheduler.Job) (scheduler.Outcome, error) {
	gc, err := s.Store.CollectQuotaGarbage(ctx, s.Clock.Now())
	if err != nil {
		return "", err
	}
	if s.OnGC != nil {
		s.OnGC(gc)
	}
	if gc == (store.QuotaGC{}) {
		return scheduler.OutcomeNoop, nil
	}
	s.Logger.Info("quota garbage collected", "observations", gc.Observations, "warmup_states", gc.WarmupStates, "oauth_flows", gc.Flows)
	return scheduler.OutcomeDone, nil
}
