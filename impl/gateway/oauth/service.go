package oauth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Errors of the flow; the admin API maps each to a stable code.
var (
	ErrNotOAuth          = errors.New("not a vendor_oauth upstream")
	ErrUnknownState      = errors.New("unknown, used or expired OAuth state")
	ErrNoCredential      = errors.New("the upstream holds no OAuth credential")
	ErrScopeInsufficient = errors.New("the granted scope does not allow inference")
)

// Job types.
const (
	RefreshJob  = "oauth_refresh"
	WatchdogJob = "oauth_watchdog"
)

// Box seals and opens secrets bound to associated data.
type Box interface {
	Seal(plaintext, associatedData []byte) ([]byte, error)
	Open(ciphertext, associatedData []byte) ([]byte, error)
}

// Enqueuer puts a durable job in the scheduler.
type Enqueuer interface {
	Enqueue(ctx context.Context, e scheduler.Enqueue) (bool, int64, error)
}

// Service runs the OAuth flow and keeps tokens fresh.
type Service struct {
	Store  store.Store
	Box    Box
	Client *Client
	Log    *slog.Logger
	Now    func() time.Time
	Jobs   Enqueuer
	// RedirectURI is registered with the provider for the client; the
	// operator copies the code shown there (or the test reads it from the
	// redirect) into the complete call.
	RedirectURI string
	Scopes      string
	// FlowTTL bounds how long a started flow may be completed.
	FlowTTL time.Duration
	// RefreshLead is how long before expiry the refresh job runs.
	RefreshLead time.Duration
	// Changed is called after a credential changed, so this replica's
	// snapshot picks it up without waiting for the reconciler.
	Changed func(ctx context.Context)
	// Connected is called after a flow completed or a token was refreshed
	// (the warm-up and usage poll enqueue their immediate work).
	Connected func(ctx context.Context, u *store.Upstream)
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.DiscardHandler)
}

func flowAD(state string) []byte { return []byte("oauth-flow:" + state) }

// FlowAD is the associated data of a flow's sealed verifier, for
// master-key rotation (proxy storage rotate-master-key).
func FlowAD(state string) []byte { return flowAD(state) }

// AuthorizeURL is the provider endpoint an upstream uses.
func AuthorizeURL(u *store.Upstream) string {
	if u.OAuthAuthorizeURL != "" {
		return u.OAuthAuthorizeURL
	}
	return DefaultAuthorizeURL
}

// TokenURL is the token endpoint an upstream uses.
func TokenURL(u *store.Upstream) string {
	if u.OAuthTokenURL != "" {
		return u.OAuthTokenURL
	}
	return DefaultTokenURL
}

// Started is the result of Start.
type Started struct {
	AuthorizationURL string
	State            string
	ExpiresAt        time.Time
}

// Start begins an authorization for an upstream: a fresh state and PKCE
// verifier, the verifier sealed in the database (any replica may complete
// the flow), and the URL for the operator to open.
func (s *Service) Start(ctx context.Context, upstreamID string) (*Started, error) {
	u, err := s.Store.GetUpstream(ctx, upstreamID)
	if err != nil {
		return nil, err
	}
	if u.Kind != store.KindVendorOAuth {
		return nil, ErrNotOAuth
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	state := base64.RawURLEncoding.EncodeToString(b)
	verifier := NewVerifier()
	sealed, err := s.Box.Seal([]byte(verifier), flowAD(state))
	if err != nil {
		return nil, err
	}
	now := s.now()
	ttl := s.FlowTTL
	if ttl <= 0 {
		ttl = 10 * time.Minute
	}
	redirect := s.RedirectURI
	if redirect == "" {
		redirect = DefaultRedirectURI
	}
	if err := s.Store.CreateOAuthFlow(ctx, store.OAuthFlow{State: state, UpstreamID: u.ID, Verifier: sealed,
		RedirectURI: redirect, CreatedAt: now, ExpiresAt: now.Add(ttl)}); err != nil {
		return nil, err
	}
	au, err := url.Parse(AuthorizeURL(u))
	if err != nil {
		return nil, fmt.Errorf("authorize url: %w", err)
	}
	scopes := s.Scopes
	if scopes == "" {
		scopes = DefaultScopes
	}
	q := au.Query()
	q.Set("code", "true")
	q.Set("client_id", s.Client.clientID())
	q.Set("response_type", "code")
	q.Set("redirect_uri", redirect)
	q.Set("scope", scopes)
	q.Set("code_challenge", Challenge(verifier))
	q.Set("code_challenge_method", "S256")
	q.Set("state", state)
	au.RawQuery = q.Encode()
	return &Started{AuthorizationURL: au.String(), State: state, ExpiresAt: now.Add(ttl)}, nil
}

// Complete exchanges the code of a started flow and stores the tokens
// sealed as the upstream's credential. It returns the credential mode
// negotiated: "oauth" (bearer token with the inference scope).
func (s *Service) Complete(ctx context.Context, upstreamID, state, code string) (*store.Upstream, string, error) {
	// Codes pasted from the provider's callback page come as "code#state".
	if i := strings.IndexByte(code, '#'); i >= 0 {
		code = code[:i]
	}
	f, err := s.Store.TakeOAuthFlow(ctx, state, s.now())
	if errors.Is(err, store.ErrNotFound) || (err == nil && f.UpstreamID != upstreamID) {
		return nil, "", ErrUnknownState
	}
	if err != nil {
		return nil, "", err
	}
	u, err := s.Store.GetUpstream(ctx, upstreamID)
	if err != nil {
		return nil, "", err
	}
	verifier, err := s.Box.Open(f.Verifier, flowAD(state))
	if err != nil {
		return nil, "", fmt.Errorf("open the flow's verifier: %w", err)
	}
	tok, err := s.Client.Exchange(ctx, TokenURL(u), code, string(verifier), f.RedirectURI, state)
	if err != nil {
		return nil, "", err
	}
	if !tok.HasScope(InferenceScope) {
		return nil, "", ErrScopeInsufficient
	}
	u, err = s.storeToken(ctx, u, tok)
	if err != nil {
		return nil, "", err
	}
	s.log().Info("oauth connected", "upstream_id", u.ID, "credential_version", u.CredentialVersion)
	if s.Connected != nil {
		s.Connected(ctx, u)
	}
	return u, "oauth", nil
}

// storeToken seals tok as u's credential, schedules its refresh and
// refreshes this replica's snapshot.
func (s *Service) storeToken(ctx context.Context, u *store.Upstream, tok *Token) (*store.Upstream, error) {
	pt, _ := json.Marshal(tok)
	sealed, err := s.Box.Seal(pt, snapshot.CredentialAD(u.ID))
	if err != nil {
		return nil, err
	}
	u, err = s.Store.SetUpstreamCredential(ctx, u.ID, "oauth", sealed)
	if err != nil {
		return nil, err
	}
	if s.Changed != nil {
		s.Changed(ctx)
	}
	if err := s.scheduleRefresh(ctx, u, tok); err != nil {
		s.log().Warn("schedule token refresh", "upstream_id", u.ID, "error", err)
	}
	return u, nil
}

// RefreshKey is the refresh job of one credential version: a credential
// is refreshed once, and its successor gets its own key.
func RefreshKey(upstreamID string, version int64) string {
	return fmt.Sprintf("%s:%s:%d", RefreshJob, upstreamID, version)
}

type refreshPayload struct {
	UpstreamID        string `json:"upstream_id"`
	CredentialVersion int64  `json:"credential_version"`
}

func (s *Service) scheduleRefresh(ctx context.Context, u *store.Upstream, tok *Token) error {
	if s.Jobs == nil {
		return nil
	}
	lead := s.RefreshLead
	if lead <= 0 {
		lead = 10 * time.Minute
	}
	var at time.Time
	if tok.ExpiresAt > 0 {
		exp := time.Unix(tok.ExpiresAt, 0)
		// Never more than half the lifetime early, so short-lived tokens
		// are not refreshed in a loop.
		if life := exp.Sub(s.now()); life < 2*lead {
			lead = life / 2
		}
		at = exp.Add(-lead)
	}
	p, _ := json.Marshal(refreshPayload{UpstreamID: u.ID, CredentialVersion: u.CredentialVersion})
	_, _, err := s.Jobs.Enqueue(ctx, scheduler.Enqueue{Type: RefreshJob, IdempotencyKey: RefreshKey(u.ID, u.CredentialVersion), Payload: p, RunAt: at})
	return err
}

// Token opens an upstream's OAuth credential.
func (s *Service) Token(u *store.Upstream) (*Token, error) {
	if u.Kind != store.KindVendorOAuth || u.CredentialKind != "oauth" || len(u.Credential) == 0 {
		return nil, ErrNoCredential
	}
	pt, err := s.Box.Open(u.Credential, snapshot.CredentialAD(u.ID))
	if err != nil {
		return nil, fmt.Errorf("open the upstream's credential: %w", err)
	}
	var t Token
	if err := json.Unmarshal(pt, &t); err != nil || t.AccessToken == "" {
		return nil, errors.New("the upstream's credential is not an OAuth token")
	}
	return &t, nil
}

// Revoke drops an upstream's OAuth credential. Warm-up and polls stop (they
// need a credential); a new flow connects it again.
func (s *Service) Revoke(ctx context.Context, upstreamID string) (*store.Upstream, error) {
	u, err := s.Store.GetUpstream(ctx, upstreamID)
	if err != nil {
		return nil, err
	}
	if u.Kind != store.KindVendorOAuth {
		return nil, ErrNotOAuth
	}
	if u.CredentialKind != "oauth" {
		return u, nil // nothing to revoke: idempotent
	}
	u, err = s.Store.SetUpstreamCredential(ctx, upstreamID, "", nil)
	if err != nil {
		return nil, err
	}
	if s.Changed != nil {
		s.Changed(ctx)
	}
	s.log().Info("oauth credential revoked", "upstream_id", upstreamID)
	return u, nil
}

// Types are the durable job types of the service.
func (s *Service) Types(watchdogEvery time.Duration) []scheduler.Type {
	return []scheduler.Type{
		{Name: RefreshJob, Class: scheduler.Entity, Timeout: time.Minute, Handler: s.refresh},
		{Name: WatchdogJob, Class: scheduler.Maintenance, Every: watchdogEvery, Timeout: time.Minute, Handler: s.watchdog},
	}
}

// refresh rotates one credential version's tokens.
func (s *Service) refresh(ctx context.Context, j scheduler.Job) (scheduler.Outcome, error) {
	var p refreshPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil || p.UpstreamID == "" {
		return "", fmt.Errorf("refresh payload: %w", scheduler.ErrPermanent)
	}
	u, err := s.Store.GetUpstream(ctx, p.UpstreamID)
	if errors.Is(err, store.ErrNotFound) {
		return scheduler.OutcomeNoop, nil
	}
	if err != nil {
		return "", err
	}
	if u.CredentialVersion != p.CredentialVersion || u.CredentialKind != "oauth" {
		return scheduler.OutcomeNoop, nil // replaced or revoked since: this version's refresh is moot
	}
	old, err := s.Token(u)
	if err != nil {
		return "", fmt.Errorf("%v: %w", err, scheduler.ErrPermanent)
	}
	tok, err := s.Client.Refresh(ctx, TokenURL(u), old.RefreshToken)
	if err != nil {
		if IsPermanent(err) {
			msg := "OAuth token refresh refused by the provider; run the OAuth flow again"
			_ = s.Store.SetUpstreamStatus(ctx, u.ID, store.UpstreamStatus{LastApplyError: &msg, LastApplyAt: ptr(s.now()), LastWarmupAt: u.Status.LastWarmupAt})
			s.log().Warn("oauth refresh refused", "upstream_id", u.ID, "error", err)
			return "", fmt.Errorf("%v: %w", err, scheduler.ErrPermanent)
		}
		return "", err
	}
	if tok.AccountUUID == "" {
		tok.AccountUUID, tok.OrganizationUUID = old.AccountUUID, old.OrganizationUUID
	}
	u, err = s.storeToken(ctx, u, tok)
	if err != nil {
		return "", err
	}
	s.log().Info("oauth token refreshed", "upstream_id", u.ID, "credential_version", u.CredentialVersion)
	if s.Connected != nil {
		s.Connected(ctx, u)
	}
	return scheduler.OutcomeDone, nil
}

func ptr[T any](v T) *T { return &v }

// watchdog makes sure every connected upstream has its refresh scheduled
// (a lost enqueue, or a restore from backup, would otherwise let it expire).
func (s *Service) watchdog(ctx context.Context, _ scheduler.Job) (scheduler.Outcome, error) {
	us, err := s.Store.ListUpstreams(ctx)
	if err != nil {
		return "", err
	}
	n := 0
	for i := range us {
		u := &us[i]
		tok, err := s.Token(u)
		if err != nil {
			continue
		}
		if err := s.scheduleRefresh(ctx, u, tok); err != nil {
			return "", err
		}
		n++
	}
	if n == 0 {
		return scheduler.OutcomeNoop, nil
	}
	return scheduler.OutcomeDone, nil
}
