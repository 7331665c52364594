package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/oauth"
	"github.com/pillarhq/pillar/impl/gateway/quota"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// OAuth is what the admin API needs of the OAuth, warm-up and quota
// services of vendor_oauth upstreams.
type OAuth interface {
	Start(ctx context.Context, upstreamID string) (*oauth.Started, error)
	Complete(ctx context.Context, upstreamID, state, code string) (*store.Upstream, string, error)
	Revoke(ctx context.Context, upstreamID string) (*store.Upstream, error)
	Observe(ctx context.Context, u *store.Upstream) (*quota.View, error)
	Claim(ctx context.Context, upstreamID string) (*quota.View, error)
	// WarmupEnabled enqueues an immediate warm-up attempt.
	WarmupEnabled(ctx context.Context, u *store.Upstream)
}

// oauthEndpoints validates the OAuth endpoint overrides of a create or
// update; they only apply to vendor_oauth upstreams.
func (a *api) oauthEndpoints(ctx context.Context, kind string, authorize, token *string, curAuthorize, curToken string) (string, string, error) {
	if kind != store.KindVendorOAuth {
		if authorize != nil || token != nil {
			return "", "", invalid("oauth_authorize_url and oauth_token_url apply to vendor_oauth upstreams only")
		}
		return "", "", nil
	}
	check := func(field string, v *string, cur string) (string, error) {
		if v == nil {
			return cur, nil
		}
		if *v == "" {
			return "", nil // back to the provider's default
		}
		if field == "oauth_token_url" {
			// The proxy itself posts to the token endpoint: the
			// destination policy applies as to base_url.
			return *v, a.location(ctx, field, *v)
		}
		return *v, validLocation(field, *v)
	}
	au, err := check("oauth_authorize_url", authorize, curAuthorize)
	if err != nil {
		return "", "", err
	}
	t, err := check("oauth_token_url", token, curToken)
	return au, t, err
}

func (a *api) oauthService() (OAuth, error) {
	if a.OAuth == nil {
		return nil, newErr("oauth_not_configured", "this server runs without the OAuth services (no scheduler)")
	}
	return a.OAuth, nil
}

// oauthCall is the start of the OAuth endpoints that take no body: the
// services, an empty (or absent) body, and the upstream id.
func (a *api) oauthCall(r *http.Request) (OAuth, string, error) {
	svc, err := a.oauthService()
	if err != nil {
		return nil, "", err
	}
	if err := decodeOptional(r, &struct{}{}); err != nil {
		return nil, "", err
	}
	return svc, r.PathValue("id"), nil
}

func (a *api) warmupEnabled(ctx context.Context, u *store.Upstream) {
	if a.OAuth != nil && hasOAuth(u) && u.Enabled {
		a.OAuth.WarmupEnabled(ctx, u)
	}
}

// oauthErr maps the services' errors onto API errors.
func oauthErr(err error, id string) error {
	var pe *oauth.ProviderError
	switch {
	case errors.Is(err, oauth.ErrNotOAuth):
		return newErr("not_oauth_upstream", "upstream %q is not a vendor_oauth upstream", id)
	case errors.Is(err, oauth.ErrUnknownState):
		return newErr("invalid_oauth_state", "the state is unknown, already used, expired or belongs to another upstream; start the flow again")
	case errors.Is(err, oauth.ErrScopeInsufficient):
		return newErr("oauth_scope_insufficient", "the provider granted no %s scope; authorize with an account that may use the Messages API", oauth.InferenceScope)
	case errors.Is(err, oauth.ErrNoCredential):
		return newErr("coupon_unavailable", "the upstream holds no OAuth credential; complete the OAuth flow first")
	case errors.Is(err, oauth.ErrRefreshRefused):
		return newErr("coupon_unavailable", "the provider refused the upstream's refresh grant, so its token is revoked and no claim is sent; run the OAuth flow again")
	case errors.Is(err, quota.ErrNoCoupon):
		return newErr("coupon_unavailable", "no usable reset coupon is advertised (none observed, stale, taken with a replaced credential, expired or already being claimed)")
	case errors.Is(err, quota.ErrAccountMismatch):
		return newErr("account_mismatch", "the credential's live account is not the account the coupon was observed on; wait for the next usage poll")
	case errors.Is(err, quota.ErrClaimInProgress):
		return newErr("claim_in_progress", "another claim holds this coupon's fence")
	case errors.Is(err, quota.ErrClaimRejected):
		return newErr("claim_rejected", "the provider refused the claim; the coupon is not advertised until the next usage poll")
	case errors.Is(err, quota.ErrOutcomeUnknown):
		return newErr("claim_outcome_unknown", "the provider's answer to the claim was lost; the fence holds until a usage poll at least %s later recovers it (the claim is never sent again)", quota.RecoverAfter)
	case errors.Is(err, quota.ErrProviderUnusable):
		return newErr("provider_unavailable", "the provider could not be asked for the account identity; retry later")
	case errors.As(err, &pe):
		if pe.Op == "token exchange" {
			e := newErr("oauth_exchange_failed", "the provider refused the authorization code (%d %s); start the flow again", pe.Status, pe.Code)
			return e
		}
		return newErr("provider_unavailable", "the provider answered %d %s", pe.Status, pe.Code)
	}
	return fromStore(err, resUpstream, id)
}

// OAuthStartResponse is the body of POST …/oauth/start.
type OAuthStartResponse struct {
	AuthorizationURL string `json:"authorization_url"`
	State            string `json:"state"`
	ExpiresAtUnix    int64  `json:"expires_at_unix_secs"`
}

func (a *api) oauthStart(w http.ResponseWriter, r *http.Request) error {
	svc, id, err := a.oauthCall(r)
	if err != nil {
		return err
	}
	st, err := svc.Start(r.Context(), id)
	if err != nil {
		return oauthErr(err, id)
	}
	writeJSON(w, http.StatusOK, OAuthStartResponse{AuthorizationURL: st.AuthorizationURL, State: st.State, ExpiresAtUnix: st.ExpiresAt.Unix()})
	return nil
}

// OAuthCompleteBody is the body of POST …/oauth/complete.
type OAuthCompleteBody struct {
	State string `json:"state"`
	Code  string `json:"code"`
}

func (a *api) oauthComplete(w http.ResponseWriter, r *http.Request) error {
	svc, err := a.oauthService()
	if err != nil {
		return err
	}
	var b OAuthCompleteBody
	if err := decode(r, &b); err != nil {
		return err
	}
	if b.State == "" || b.Code == "" {
		return invalid("state and code are required")
	}
	id := r.PathValue("id")
	u, mode, err := svc.Complete(r.Context(), id, b.State, b.Code)
	if err != nil {
		return oauthErr(err, id)
	}
	a.changed(r.Context())
	resp := upstreamResponse(u)
	resp.CredentialMode = &mode
	etag(w, u.SpecRevision)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

func (a *api) oauthRevoke(w http.ResponseWriter, r *http.Request) error {
	svc, id, err := a.oauthCall(r)
	if err != nil {
		return err
	}
	u, err := svc.Revoke(r.Context(), id)
	if err != nil {
		return oauthErr(err, id)
	}
	a.changed(r.Context())
	etag(w, u.SpecRevision)
	writeJSON(w, http.StatusOK, upstreamResponse(u))
	return nil
}

// LimitResetObservation is the body of GET …/limit-resets: the stored
// observation of the provider's windows and reset coupon, as the last
// usage poll saw it. Nothing here contacts the provider.
type LimitResetObservation struct {
	UpstreamID string `json:"upstream_id"`
	// Observed is false before the first poll; every other field is then null.
	Observed          bool            `json:"observed"`
	ObservedAtUnix    *int64          `json:"observed_at_unix_secs"`
	PolledAtUnix      *int64          `json:"polled_at_unix_secs"`
	Stale             bool            `json:"stale"`
	CredentialVersion *int64          `json:"credential_version"`
	AccountUUID       *string         `json:"account_uuid"`
	FiveHour          *QuotaWindow    `json:"five_hour"`
	SevenDay          *QuotaWindow    `json:"seven_day"`
	ExtraUsage        json.RawMessage `json:"extra_usage"`
	Coupon            CouponStatus    `json:"coupon"`
	Fence             *CouponFence    `json:"fence"`
}

// QuotaWindow is one usage window.
type QuotaWindow struct {
	Utilization  float64 `json:"utilization"`
	ResetsAtUnix *int64  `json:"resets_at_unix_secs"`
	Active       bool    `json:"active"`
}

// CouponStatus tells whether a coupon may be claimed now.
type CouponStatus struct {
	// Available is what the API advertises: false before an observation,
	// after a credential replacement, when stale, expired or fenced.
	Available bool `json:"available"`
	// ProviderReported is what the last applied poll said.
	ProviderReported bool    `json:"provider_reported"`
	CouponID         *string `json:"coupon_id"`
	ExpiresAtUnix    *int64  `json:"expires_at_unix_secs"`
}

// CouponFence is the claim fence.
type CouponFence struct {
	State           string `json:"state"`
	AcquiredAtUnix  int64  `json:"acquired_at_unix_secs"`
	ResolvedAtUnix  *int64 `json:"resolved_at_unix_secs"`
	RecoverableFrom *int64 `json:"recoverable_from_unix_secs"`
}

func observationResponse(id string, v *quota.View, now time.Time) LimitResetObservation {
	out := LimitResetObservation{UpstreamID: id}
	q := v.Observation
	if q == nil {
		return out
	}
	out.Observed, out.Stale = true, v.Stale
	out.ObservedAtUnix, out.PolledAtUnix = unixp(&q.ObservedAt), unixp(&q.PolledAt)
	out.CredentialVersion = &q.CredentialVersion
	if q.AccountUUID != "" {
		out.AccountUUID = &q.AccountUUID
	}
	win := func(w store.QuotaWindow) *QuotaWindow {
		return &QuotaWindow{Utilization: w.Utilization, ResetsAtUnix: unixp(w.ResetsAt), Active: w.Active(now)}
	}
	out.FiveHour, out.SevenDay = win(q.FiveHour), win(q.SevenDay)
	if len(q.ExtraUsage) > 0 {
		out.ExtraUsage = q.ExtraUsage
	}
	out.Coupon = CouponStatus{Available: v.Usable, ProviderReported: q.CouponAvailable, ExpiresAtUnix: unixp(q.CouponExpiresAt)}
	if q.CouponID != "" {
		out.Coupon.CouponID = &q.CouponID
	}
	if f := q.Fence; f != nil {
		out.Fence = &CouponFence{State: f.State, AcquiredAtUnix: f.AcquiredAt.Unix(), ResolvedAtUnix: unixp(f.ResolvedAt)}
		if f.State == store.FenceClaiming {
			r := f.AcquiredAt.Add(quota.RecoverAfter).Unix()
			out.Fence.RecoverableFrom = &r
		}
	}
	return out
}

// limitResets returns the stored limit-reset observation; it never
// contacts the provider.
func (a *api) limitResets(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	u, err := a.Store.GetUpstream(r.Context(), id)
	if err != nil {
		return fromStore(err, resUpstream, id)
	}
	v := &quota.View{}
	if a.OAuth != nil {
		if v, err = a.OAuth.Observe(r.Context(), u); err != nil {
			return fromStore(err, resUpstream, id)
		}
	}
	writeJSON(w, http.StatusOK, observationResponse(id, v, a.Clock.Now()))
	return nil
}

// ClaimResponse is the body of a successful claim.
type ClaimResponse struct {
	Outcome     string                `json:"outcome"`
	Observation LimitResetObservation `json:"observation"`
}

// claimLimitReset claims the upstream's advertised reset coupon: one
// provider POST under the durable fence.
func (a *api) claimLimitReset(w http.ResponseWriter, r *http.Request) error {
	svc, id, err := a.oauthCall(r)
	if err != nil {
		return err
	}
	v, err := svc.Claim(r.Context(), id)
	if err != nil {
		e := oauthErr(err, id)
		var ae *APIError
		if v != nil && errors.As(e, &ae) {
			ae.Details = map[string]any{"observation": observationResponse(id, v, a.Clock.Now())}
		}
		return e
	}
	writeJSON(w, http.StatusOK, ClaimResponse{Outcome: "reset", Observation: observationResponse(id, v, a.Clock.Now())})
	return nil
}
