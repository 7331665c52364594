package store

import (
	"context"
	"encoding/json"
	"time"
)

// OAuthStore holds the state of vendor_oauth upstreams that is not
// configuration: pending authorization flows, the usage observations of the
// provider's quota windows with the reset-coupon fence, and the warm-up
// cycle record. None of these writes bumps a revision or the config
// generation: they are background writes.
type OAuthStore interface {
	// CreateOAuthFlow records a started authorization (state is the key).
	CreateOAuthFlow(ctx context.Context, f OAuthFlow) error
	// TakeOAuthFlow removes and returns the flow of state; ErrNotFound when
	// there is none or it expired before now. A state is usable once.
	TakeOAuthFlow(ctx context.Context, state string, now time.Time) (*OAuthFlow, error)

	// GetQuota returns the stored observation; ErrNotFound before the first.
	GetQuota(ctx context.Context, upstreamID string) (*QuotaObservation, error)
	// PutQuota stores a poll's observation under the coupon fence's rules:
	// a response whose poll started before a claim was resolved is stale and
	// changes nothing (it can never restore a consumed coupon); while a claim
	// is unresolved the coupon fields are kept unless the poll started at
	// least recoverAfter after the fence was taken, which recovers the fence
	// from the provider's fresh state. applied reports whether anything was
	// written. An observation without AccountUUID keeps the stored identity
	// when it was resolved for the same credential version.
	PutQuota(ctx context.Context, obs QuotaObservation, recoverAfter time.Duration) (applied bool, err error)
	// AcquireCouponFence atomically takes the claim fence for couponID: only
	// one caller wins while the stored observation advertises that coupon
	// for credentialVersion and no fence is held. Losers get ErrConflict.
	AcquireCouponFence(ctx context.Context, upstreamID, couponID string, credentialVersion int64, now time.Time) (fenceID string, err error)
	// ResolveCouponFence ends an unresolved fence: FenceConsumed and
	// FenceRejected mark the coupon unusable until a poll that starts later;
	// FenceReleased drops the fence (the POST was certainly not sent).
	ResolveCouponFence(ctx context.Context, upstreamID, fenceID, outcome string, now time.Time) error

	// GetWarmupState returns the warm-up record; a zero record when none.
	GetWarmupState(ctx context.Context, upstreamID string) (*WarmupState, error)
	// AcquireWarmupLease gives owner the upstream's warm-up lease until
	// until, unless another owner holds an unexpired one (false).
	AcquireWarmupLease(ctx context.Context, upstreamID, owner string, until, now time.Time) (bool, error)
	// ReleaseWarmupLease drops owner's lease, if it still holds it.
	ReleaseWarmupLease(ctx context.Context, upstreamID, owner string) error
	// WriteCycleKey records a completed warm-up cycle and stamps the
	// upstream's status.last_warmup_at; written is false when the key was
	// already the recorded one (a repeat of an at-least-once delivery).
	WriteCycleKey(ctx context.Context, upstreamID, cycleKey string, now time.Time) (written bool, err error)
	// RecordResetCycleKey records the reset cycle of a skipped attempt
	// (seven-day quota exhausted); it does not stamp the upstream as warmed.
	RecordResetCycleKey(ctx context.Context, upstreamID, cycleKey string, now time.Time) error

	// CollectQuotaGarbage deletes quota observations and warm-up records of
	// upstreams that are deleted or no longer hold OAuth credentials, and
	// authorization flows that expired before now.
	CollectQuotaGarbage(ctx context.Context, now time.Time) (QuotaGC, error)
}

// OAuthFlow is a started authorization-code flow with PKCE.
type OAuthFlow struct {
	State      string
	UpstreamID string
	// Verifier is the sealed PKCE code verifier.
	Verifier    []byte
	RedirectURI string
	CreatedAt   time.Time
	ExpiresAt   time.Time
}

// QuotaWindow is one of the provider's usage windows.
type QuotaWindow struct {
	// Utilization is in percent (0–100).
	Utilization float64
	// ResetsAt is the window's end; nil when no window is active.
	ResetsAt *time.Time
}

// Active reports whether the window is open at now.
func (w *QuotaWindow) Active(now time.Time) bool {
	return w != nil && w.ResetsAt != nil && w.ResetsAt.After(now)
}

// Exhausted reports whether the window is open at now and used up.
func (w *QuotaWindow) Exhausted(now time.Time) bool {
	return w.Active(now) && w.Utilization >= 100
}

// Coupon fence states.
const (
	FenceClaiming = "claiming"
	FenceConsumed = "consumed"
	FenceRejected = "rejected"
	FenceReleased = "released"
)

// QuotaObservation is what the usage poll saw of an upstream's account.
type QuotaObservation struct {
	UpstreamID string
	// CredentialVersion is the upstream credential the poll used.
	CredentialVersion int64
	// PolledAt is when the poll's request was sent; ObservedAt when its
	// response arrived.
	PolledAt   time.Time
	ObservedAt time.Time
	FiveHour   QuotaWindow
	SevenDay   QuotaWindow
	// ExtraUsage is the provider's extra-usage object, verbatim.
	ExtraUsage json.RawMessage
	// CouponReported: the response carried reset-coupon data.
	CouponReported  bool
	CouponAvailable bool
	CouponID        string
	CouponExpiresAt *time.Time
	// AccountUUID is the account identity, resolved once per credential
	// version (IdentityVersion) when coupon data is present.
	AccountUUID     string
	IdentityVersion int64
	// Fence is the reset-coupon claim fence, nil when none is held.
	Fence *CouponFence
}

// CouponFence is the durable fence of one coupon claim.
type CouponFence struct {
	ID         string
	State      string
	AcquiredAt time.Time
	ResolvedAt *time.Time
}

// WarmupState is the warm-up record of an upstream.
type WarmupState struct {
	UpstreamID     string
	CycleKey       string
	CycleWrittenAt *time.Time
	// ResetCycleKey is the reset cycle recorded by the last skip for an
	// exhausted seven-day window.
	ResetCycleKey   string
	ResetRecordedAt *time.Time
	LeaseOwner      string
	LeaseUntil      *time.Time
}

// QuotaGC counts what CollectQuotaGarbage removed.
type QuotaGC struct {
	Observations int64
	WarmupStates int64
	Flows        int64
}
