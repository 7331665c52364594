package oauth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/service"
)

// Errors of the flow; the admin API maps each to a stable code.
var (
	ErrNotOAuth          = errors.New("not a vendor_oauth upstream")
	ErrUnknownState      = errors.New("unknown, used or expired OAuth state")
	ErrNoCredential      = errors.New("the upstream holds no OAuth credential")
	ErrScopeInsufficient = errors.New("the granted scope does not allow inference")
	// ErrRefreshRefused: the provider refused the credential's refresh
	// grant for good (invalid_grant); only a new flow connects it again.
	ErrRefreshRefused = errors.New("the provider refused the OAuth refresh grant; run the OAuth flow again")
	// ErrLazyRefreshTimeout: a request-path refresh took longer than
	// LazyRefreshTimeout and was abandoned (the scheduled refresh remains).
	ErrLazyRefreshTimeout = errors.New("lazy OAuth token refresh timed out")
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

// Enqueuer puts a durable job in the scheduler and lists a job family (the
// watchdog decides from what is really queued).
type Enqueuer interface {
	Enqueue(ctx context.Context, e scheduler.Enqueue) (bool, int64, error)
	Family(ctx context.Context, jobType, prefix string) ([]scheduler.JobInfo, error)
}

// DefaultLazyRefreshTimeout bounds a request-path refresh when
// Service.LazyRefreshTimeout is zero.
const DefaultLazyRefreshTimeout = 10 * time.Second

// DefaultLazyRefreshCooldown is how long after a refresh on this replica a
// lazy refresh of the same upstream is answered without asking the
// provider: requests already in flight with the old token may still be
// refused, and each would otherwise rotate the token again.
const DefaultLazyRefreshCooldown = 30 * time.Second

// Service runs the OAuth flow and keeps tokens fresh.
type Service struct {
	Store  store.Store
	Box    Box
	Client *Client
	Jobs   Enqueuer
	service.Base
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
	// Metrics counts lazy-refresh timeouts; nil records nothing.
	Metrics *scheduler.Metrics
	// LazyRefreshTimeout bounds one RefreshToken refresh (zero:
	// DefaultLazyRefreshTimeout); LazyRefreshCooldown is DefaultLazyRefreshCooldown when zero.
	LazyRefreshTimeout  time.Duration
	LazyRefreshCooldown time.Duration
	// RefreshRetry is the refresh job's retry class (zero: the seed's
	// Entity class); conformance shortens it to exhaust it quickly.
	RefreshRetry scheduler.RetryClass
	// Tracer traces each token refresh (optional: nil traces nothing).
	Tracer trace.Tracer

	lazyMu    sync.Mutex
	inflight  map[string]*lazyCall
	refreshed map[string]time.Time // last successful refresh on this replica
	ended     map[string]time.Time // last lazy refresh that ended, whatever its outcome
	// joined, when set (tests), is told each time a caller joins a lazy
	// refresh already in flight.
	joined func(upstreamID string)
}

// lazyCall is one in-flight lazy refresh that concurrent callers share.
type lazyCall struct {
	done chan struct{}
	err  error
	// asked: started by RequestRefresh, whose caller does not wait for the
	// error, so the refresh logs it.
	asked bool
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
	now := s.Clock.Now()
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
	f, err := s.Store.TakeOAuthFlow(ctx, state, s.Clock.Now())
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
	s.Logger.Info("oauth connected", "upstream_id", u.ID, "credential_version", u.CredentialVersion)
	if s.Connected != nil {
		s.Connected(ctx, u)
	}
	return u, credential.OAuth, nil
}

// storeToken seals tok as u's credential, schedules its refresh and
// refreshes this replica's snapshot.
func (s *Service) storeToken(ctx context.Context, u *store.Upstream, tok *Token) (*store.Upstream, error) {
	pt, _ := json.Marshal(tok)
	sealed, err := s.Box.Seal(pt, credential.UpstreamAD(u))
	if err != nil {
		return nil, err
	}
	u, err = s.Store.SetUpstreamCredential(ctx, u.ID, credential.OAuth, sealed)
	if err != nil {
		return nil, err
	}
	if s.Changed != nil {
		s.Changed(ctx)
	}
	if err := s.scheduleRefresh(ctx, u, tok); err != nil {
		s.Logger.Warn("schedule token refresh", "upstream_id", u.ID, "error", err)
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
		if life := exp.Sub(s.Clock.Now()); life < 2*lead {
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
	if u.Kind != store.KindVendorOAuth || u.CredentialKind != credential.OAuth || len(u.Credential) == 0 {
		return nil, ErrNoCredential
	}
	pt, err := s.Box.Open(u.Credential, credential.UpstreamAD(u))
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
	if u.CredentialKind != credential.OAuth {
		return u, nil // nothing to revoke: idempotent
	}
	u, err = s.Store.SetUpstreamCredential(ctx, upstreamID, "", nil)
	if err != nil {
		return nil, err
	}
	if s.Changed != nil {
		s.Changed(ctx)
	}
	s.Logger.Info("oauth credential revoked", "upstream_id", upstreamID)
	return u, nil
}

// Types are the durable job types of the service.
func (s *Service) Types(watchdogEvery time.Duration) []scheduler.Type {
	return []scheduler.Type{
		{Name: RefreshJob, Class: s.refreshClass(), Timeout: time.Minute, Handler: s.refresh},
		{Name: WatchdogJob, Class: scheduler.Maintenance, Every: watchdogEvery, Timeout: time.Minute, Handler: s.watchdog},
	}
}

func (s *Service) refreshClass() scheduler.RetryClass {
	if s.RefreshRetry.MaxAttempts > 0 {
		return s.RefreshRetry
	}
	return scheduler.Entity
}

// refresh rotates one credential version's tokens. Every failure is
// recorded in the upstream's status (the refresh columns, shown as
// last_apply_error); a refusal of the grant is permanent and never retried.
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
	if u.CredentialVersion != p.CredentialVersion || u.CredentialKind != credential.OAuth {
		return scheduler.OutcomeNoop, nil // replaced or revoked since: this version's refresh is moot
	}
	moot, err := s.rotate(ctx, u)
	switch {
	case moot:
		return scheduler.OutcomeNoop, nil
	case errors.Is(err, ErrRefreshRefused):
		return "", fmt.Errorf("%v: %w", err, scheduler.ErrPermanent)
	case err != nil:
		msg := fmt.Sprintf("OAuth token refresh failed (attempt %d of %d): %s", j.Attempt, j.MaxAttempts, scheduler.Redact(err.Error()))
		if j.Attempt >= j.MaxAttempts {
			msg += "; retries exhausted, the OAuth watchdog queues a new refresh on its next tick"
		}
		s.recordFailure(ctx, u, msg, false)
		return "", err
	}
	return scheduler.OutcomeDone, nil
}

// rotate trades u's refresh token for new tokens and stores them. moot
// reports a refusal that lost a race: another refresh (another replica, or
// the other path) rotated the token first, so nothing failed. A refusal of
// the current credential is recorded and returned as ErrRefreshRefused.
func (s *Service) rotate(ctx context.Context, u *store.Upstream) (moot bool, err error) {
	ctx, span := tracing.Start(ctx, s.Tracer, "oauth refresh", tracing.UpstreamID.String(u.ID))
	defer func() { endRefresh(span, moot, err) }()
	old, err := s.Token(u)
	if err != nil {
		return false, fmt.Errorf("%v: %w", err, scheduler.ErrPermanent)
	}
	tok, err := s.Client.Refresh(ctx, TokenURL(u), old.RefreshToken)
	if err != nil {
		if !IsPermanent(err) {
			return false, err
		}
		msg := "OAuth token refresh refused by the provider"
		var pe *ProviderError
		if errors.As(err, &pe) && pe.Code != "" {
			msg += " (" + pe.Code + ")"
		}
		msg += "; run the OAuth flow again"
		if !s.recordFailure(ctx, u, msg, true) {
			return true, nil
		}
		// Routing leaves the upstream out from now on: this replica's
		// snapshot at once, the others through the change it recorded.
		if s.Changed != nil {
			s.Changed(ctx)
		}
		s.Logger.Warn("oauth refresh refused", "upstream_id", u.ID, "credential_version", u.CredentialVersion, "error", scheduler.Redact(err.Error()))
		return false, fmt.Errorf("%w: %s", ErrRefreshRefused, scheduler.Redact(err.Error()))
	}
	if tok.AccountUUID == "" {
		tok.AccountUUID, tok.OrganizationUUID = old.AccountUUID, old.OrganizationUUID
	}
	nu, err := s.storeToken(ctx, u, tok)
	if err != nil {
		return false, err
	}
	s.lazyMu.Lock()
	if s.refreshed == nil {
		s.refreshed = map[string]time.Time{}
	}
	s.refreshed[u.ID] = s.Clock.Now()
	s.lazyMu.Unlock()
	s.Logger.Info("oauth token refreshed", "upstream_id", nu.ID, "credential_version", nu.CredentialVersion)
	if s.Connected != nil {
		s.Connected(ctx, nu)
	}
	return false, nil
}

// recordFailure writes a refresh failure of u's credential version into
// its status; false means the credential was replaced meanwhile.
func (s *Service) recordFailure(ctx context.Context, u *store.Upstream, msg string, refused bool) bool {
	ok, err := s.Store.RecordRefreshFailure(ctx, u.ID, u.CredentialVersion, msg, refused, s.Clock.Now())
	if err != nil {
		s.Logger.Warn("record oauth refresh failure", "upstream_id", u.ID, "error", err)
		return true // the failure stands even though its record did not land
	}
	return ok
}

// RefreshToken refreshes an upstream's OAuth token now, for a request that
// met an expired or refused token (the relay calls it and fails over
// meanwhile). Concurrent calls for one upstream share one refresh; the
// refresh runs detached from the callers, bounded by LazyRefreshTimeout
// (a timeout counts in svc_scheduler_lazy_refresh_timeout_total). A
// refresh that succeeded on this replica within LazyRefreshCooldown
// answers at once. The new token reaches this replica's snapshot before
// it returns, as with the scheduled refresh.
func (s *Service) RefreshToken(ctx context.Context, upstreamID string) error {
	s.lazyMu.Lock()
	c := s.inflight[upstreamID]
	if c == nil {
		c = s.startLazy(upstreamID)
	} else if s.joined != nil {
		s.joined(upstreamID)
	}
	s.lazyMu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RequestRefresh asks for a lazy refresh of an upstream's token without
// waiting for it: the relay calls it for a request that met the token
// expired or refused, and fails over meanwhile. It starts one unless one
// is running or one ended within LazyRefreshCooldown, whatever its
// outcome (a token endpoint that keeps failing must not get a request
// per proxied request), and reports whether it started one. A failure is
// logged, as no caller waits for it.
func (s *Service) RequestRefresh(upstreamID string) bool {
	s.lazyMu.Lock()
	defer s.lazyMu.Unlock()
	if s.inflight[upstreamID] != nil {
		return false
	}
	if t, ok := s.ended[upstreamID]; ok && s.Clock.Now().Sub(t) < s.lazyCooldown() {
		return false
	}
	s.startLazy(upstreamID).asked = true
	return true
}

// startLazy starts the shared lazy refresh of an upstream; s.lazyMu is
// held.
func (s *Service) startLazy(upstreamID string) *lazyCall {
	if s.inflight == nil {
		s.inflight = map[string]*lazyCall{}
	}
	c := &lazyCall{done: make(chan struct{})}
	s.inflight[upstreamID] = c
	go s.lazyRefresh(upstreamID, c)
	return c
}

func (s *Service) lazyCooldown() time.Duration {
	if s.LazyRefreshCooldown > 0 {
		return s.LazyRefreshCooldown
	}
	return DefaultLazyRefreshCooldown
}

func (s *Service) lazyRefresh(upstreamID string, c *lazyCall) {
	timeout := s.LazyRefreshTimeout
	if timeout <= 0 {
		timeout = DefaultLazyRefreshTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	timedOut := false
	t := s.Clock.AfterFunc(timeout, func() {
		mu.Lock()
		timedOut = true
		mu.Unlock()
		cancel()
	})
	err := s.lazyRefreshOnce(ctx, upstreamID, timeout, func() bool { mu.Lock(); defer mu.Unlock(); return timedOut })
	t.Stop()
	cancel()
	s.lazyMu.Lock()
	if c.asked && err != nil {
		s.Logger.Warn("lazy OAuth token refresh failed", "upstream_id", upstreamID, "error", scheduler.Redact(err.Error()))
	}
	delete(s.inflight, upstreamID)
	if s.ended == nil {
		s.ended = map[string]time.Time{}
	}
	s.ended[upstreamID] = s.Clock.Now()
	c.err = err
	s.lazyMu.Unlock()
	close(c.done)
}

func (s *Service) lazyRefreshOnce(ctx context.Context, upstreamID string, timeout time.Duration, timedOut func() bool) error {
	u, err := s.Store.GetUpstream(ctx, upstreamID)
	if err != nil {
		return err
	}
	if u.Kind != store.KindVendorOAuth {
		return ErrNotOAuth
	}
	if u.CredentialKind != credential.OAuth || len(u.Credential) == 0 {
		return ErrNoCredential
	}
	if u.Status.RefreshRefused {
		return ErrRefreshRefused // already refused: asking again cannot help
	}
	s.lazyMu.Lock()
	last, ok := s.refreshed[upstreamID]
	s.lazyMu.Unlock()
	if ok && s.Clock.Now().Sub(last) < s.lazyCooldown() {
		return nil
	}
	_, err = s.rotate(ctx, u)
	if err == nil || errors.Is(err, ErrRefreshRefused) {
		return err
	}
	if timedOut() {
		if s.Metrics != nil {
			s.Metrics.LazyRefreshTimeout.Inc()
		}
		s.Logger.Warn("lazy oauth refresh timed out", "upstream_id", upstreamID, "timeout", timeout)
		s.recordFailure(context.Background(), u, fmt.Sprintf("lazy OAuth token refresh timed out after %s; the scheduled refresh and its watchdog continue", timeout), false)
		return fmt.Errorf("%w after %s", ErrLazyRefreshTimeout, timeout)
	}
	s.recordFailure(ctx, u, "lazy OAuth token refresh failed: "+scheduler.Redact(err.Error()), false)
	return err
}

// watchdog makes sure every connected upstream has a refresh queued for
// its current credential (a lost enqueue, a restore from backup, or a
// refresh that exhausted its retries would otherwise let the token
// expire). It decides from the job table: an active refresh job of the
// credential means nothing to do; none at all gets the credential's
// refresh key; a family whose jobs all ended gets a new attempt key (the
// unique key of a finished job can never be queued again). A credential
// whose refresh the provider refused is left alone: retrying cannot help,
// and its status says to run the flow again.
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
		if u.Status.RefreshRefused {
			s.Logger.Debug("oauth watchdog: refresh refused by the provider, not re-queued", "upstream_id", u.ID)
			continue
		}
		base := RefreshKey(u.ID, u.CredentialVersion)
		fam, err := s.Jobs.Family(ctx, RefreshJob, base)
		if err != nil {
			return "", err
		}
		ended := 0
		active := false
		for _, j := range fam {
			if j.IdempotencyKey != base && !strings.HasPrefix(j.IdempotencyKey, base+":") {
				continue // another version whose number starts with this one's
			}
			if j.Active() {
				active = true
			}
			ended++
		}
		switch {
		case active:
			continue
		case ended == 0:
			if err := s.scheduleRefresh(ctx, u, tok); err != nil {
				return "", err
			}
		default:
			key := fmt.Sprintf("%s:retry%d", base, ended)
			p, _ := json.Marshal(refreshPayload{UpstreamID: u.ID, CredentialVersion: u.CredentialVersion})
			inserted, _, err := s.Jobs.Enqueue(ctx, scheduler.Enqueue{Type: RefreshJob, IdempotencyKey: key, Payload: p})
			if err != nil {
				return "", err
			}
			if inserted {
				s.Logger.Warn("oauth refresh re-queued after its jobs ended without a new token", "upstream_id", u.ID,
					"credential_version", u.CredentialVersion, "idempotency_key", key)
			}
		}
		n++
	}
	if n == 0 {
		return scheduler.OutcomeNoop, nil
	}
	return scheduler.OutcomeDone, nil
}
