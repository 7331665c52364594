// Package sso signs people in to the admin API and dashboard through an
// OpenID Connect issuer (authorization code with PKCE, state and nonce),
// keeps their sessions on the server, and accepts the issuer's JWT access
// tokens as Bearer credentials for automation. Roles come from a claim
// (groups by default) through the operator's mapping.
package sso

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/service"
)

// Config is admin.auth.oidc.
type Config struct {
	// Issuer is the issuer identifier; discovery is read from it.
	Issuer       string `yaml:"issuer"`
	ClientID     string `yaml:"client_id"`
	ClientSecret string `yaml:"-"`
	// ClientSecretEnv names the variable holding the client secret.
	ClientSecretEnv string `yaml:"client_secret_env"`
	// RedirectURL is this gateway's callback: https://<admin host>/auth/callback.
	RedirectURL string `yaml:"redirect_url"`
	// Audience is the aud an access token must carry to be accepted as a
	// Bearer credential (default: ClientID).
	Audience string   `yaml:"audience"`
	Scopes   []string `yaml:"scopes"`
	// RoleClaim names the claim roles are read from: a string or a list
	// of strings (default "groups").
	RoleClaim string `yaml:"role_claim"`
	// Roles maps a claim value to a role; with several matches the most
	// powerful role wins. Nobody without a match gets in.
	Roles map[string]string `yaml:"roles"`
	// IdleTimeout ends a session unused this long; AbsoluteTimeout ends
	// any session this long after sign-in.
	IdleTimeout     time.Duration `yaml:"idle_timeout"`
	AbsoluteTimeout time.Duration `yaml:"absolute_timeout"`
}

// Validate reports every problem at once, by key under prefix.
func (c *Config) Validate(prefix string) []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", prefix, key, fmt.Sprintf(format, a...)))
	}
	if !strings.HasPrefix(c.Issuer, "https://") && !strings.HasPrefix(c.Issuer, "http://") {
		bad("issuer", "required, an http(s) URL")
	}
	if c.ClientID == "" {
		bad("client_id", "required")
	}
	if !strings.HasPrefix(c.RedirectURL, "https://") && !strings.HasPrefix(c.RedirectURL, "http://") || !strings.HasSuffix(c.RedirectURL, "/auth/callback") {
		bad("redirect_url", "required, the admin listener's URL ending in /auth/callback")
	}
	if len(c.Roles) == 0 {
		bad("roles", "map at least one %s value to a role", c.roleClaim())
	}
	for v, r := range c.Roles {
		if _, ok := admin.ParseRole(r); !ok {
			bad("roles."+v, "unknown role %q (admin, operator, viewer, auditor)", r)
		}
	}
	if c.IdleTimeout < 0 || c.AbsoluteTimeout < 0 {
		bad("idle_timeout", "must not be negative")
	}
	return errs
}

func (c *Config) roleClaim() string {
	if c.RoleClaim == "" {
		return "groups"
	}
	return c.RoleClaim
}

// Cookie names. The session cookie is HttpOnly and SameSite=Lax (the
// issuer's redirect back is a cross-site navigation); writes made with it
// also need the session's CSRF token in X-CSRF-Token.
const (
	SessionCookie = "pillar_session"
	loginCookie   = "pillar_login"
	CSRFHeader    = "X-CSRF-Token"
	loginLife     = 10 * time.Minute
	// maxPendingLogins bounds the sign-ins begun and not yet completed.
	maxPendingLogins = 4096
)

// SSO is the sign-in service and an admin.Authenticator.
type SSO struct {
	cfg      Config
	oauth    oauth2.Config
	idTokens *oidc.IDTokenVerifier
	access   *oidc.IDTokenVerifier
	ctx      context.Context // carries the HTTP client for the issuer
	secure   bool
	service.Base

	mu     sync.Mutex
	logins map[string]login
	// loginOrder holds the pending states oldest first (and states
	// already used, dropped when they reach the front).
	loginOrder []string
	sessions   map[[32]byte]*session
}

type login struct {
	nonce, verifier string
	at              time.Time
}

type session struct {
	id              admin.Identity
	csrf            string
	created, seenAt time.Time
}

// Options are New's dependencies.
type Options struct {
	// Clock dates logins, sessions and the tokens' expiry checks.
	Clock  clock.Clock
	Logger *slog.Logger
	// Client reaches the issuer (default http.DefaultClient).
	Client *http.Client
}

var _ admin.Authenticator = (*SSO)(nil)

// New reads the issuer's discovery document and returns the service.
func New(ctx context.Context, cfg Config, o Options) (*SSO, error) {
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 30 * time.Minute
	}
	if cfg.AbsoluteTimeout == 0 {
		cfg.AbsoluteTimeout = 12 * time.Hour
	}
	if cfg.Audience == "" {
		cfg.Audience = cfg.ClientID
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = []string{oidc.ScopeOpenID, "email", "profile", "groups"}
	}
	if o.Client != nil {
		ctx = oidc.ClientContext(ctx, o.Client)
	}
	// The key set outlives the start-up context: it refetches keys when a
	// token names a new one (a rotation).
	ctx = context.WithoutCancel(ctx)
	p, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidc discovery of %s: %w", cfg.Issuer, err)
	}
	s := service.Init(service.Options{Logger: o.Logger, Clock: o.Clock}, &SSO{cfg: cfg, ctx: ctx, secure: strings.HasPrefix(cfg.RedirectURL, "https://"),
		logins: map[string]login{}, sessions: map[[32]byte]*session{}})
	s.oauth = oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, Endpoint: p.Endpoint(), RedirectURL: cfg.RedirectURL, Scopes: cfg.Scopes}
	var meta struct {
		JWKSURL string   `json:"jwks_uri"`
		Algs    []string `json:"id_token_signing_alg_values_supported"`
	}
	if err := p.Claims(&meta); err != nil || meta.JWKSURL == "" {
		return nil, fmt.Errorf("oidc discovery of %s: no jwks_uri", cfg.Issuer)
	}
	client := o.Client
	if client == nil {
		client = http.DefaultClient
	}
	keys := &issuerKeys{url: meta.JWKSURL, client: client, clock: s.Clock}
	// The algorithms the issuer announces that go-oidc supports (RS256 when
	// it announces none).
	var algs []string
	for _, a := range meta.Algs {
		if a != "none" {
			algs = append(algs, a)
		}
	}
	s.idTokens = oidc.NewVerifier(cfg.Issuer, keys, &oidc.Config{ClientID: cfg.ClientID, Now: s.Clock.Now, SupportedSigningAlgs: algs})
	s.access = oidc.NewVerifier(cfg.Issuer, keys, &oidc.Config{ClientID: cfg.Audience, Now: s.Clock.Now, SupportedSigningAlgs: algs})
	return s, nil
}

// Authenticate accepts the issuer's access tokens as Bearer, or a live
// session cookie (with the CSRF header on anything but a read).
func (s *SSO) Authenticate(r *http.Request) (admin.Identity, bool) {
	if raw, ok := admin.Bearer(r); ok {
		if strings.Count(raw, ".") != 2 {
			return admin.Identity{}, false
		}
		tok, err := s.access.Verify(r.Context(), raw)
		if err != nil {
			s.Logger.DebugContext(r.Context(), "oidc access token refused", "error", err)
			return admin.Identity{}, false
		}
		return s.identity(tok)
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return admin.Identity{}, false
	}
	sess, ok := s.session(c.Value)
	if !ok {
		return admin.Identity{}, false
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead &&
		subtle.ConstantTimeCompare([]byte(r.Header.Get(CSRFHeader)), []byte(sess.csrf)) != 1 {
		return admin.Identity{}, false
	}
	return sess.id, true
}

// identity maps a verified token's claims to an identity; no role, no entry.
func (s *SSO) identity(tok *oidc.IDToken) (admin.Identity, bool) {
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return admin.Identity{}, false
	}
	role, ok := s.role(claims[s.cfg.roleClaim()])
	if !ok {
		return admin.Identity{}, false
	}
	email, _ := claims["email"].(string)
	return admin.Identity{Kind: admin.KindOIDC, Subject: tok.Subject, Issuer: tok.Issuer, Email: email, Role: role}, true
}

// role picks the most powerful role the claim's values map to.
func (s *SSO) role(v any) (admin.Role, bool) {
	var values []string
	switch t := v.(type) {
	case string:
		values = []string{t}
	case []any:
		for _, x := range t {
			if str, ok := x.(string); ok {
				values = append(values, str)
			}
		}
	}
	for _, r := range admin.Roles {
		for _, v := range values {
			if s.cfg.Roles[v] == string(r) {
				return r, true
			}
		}
	}
	return "", false
}

func (s *SSO) session(cookie string) (*session, bool) {
	key := sha256.Sum256([]byte(cookie))
	now := s.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.sessions[key]
	if !ok {
		return nil, false
	}
	if now.Sub(sess.seenAt) >= s.cfg.IdleTimeout || now.Sub(sess.created) >= s.cfg.AbsoluteTimeout {
		delete(s.sessions, key)
		return nil, false
	}
	sess.seenAt = now
	return sess, true
}

// Handler serves /auth/login, /auth/callback, /auth/session and
// /auth/logout; mount it without authentication.
func (s *SSO) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /auth/login", s.login)
	mux.HandleFunc("GET /auth/callback", s.callback)
	mux.HandleFunc("GET /auth/session", s.sessionInfo)
	mux.HandleFunc("POST /auth/logout", s.logout)
	return mux
}

func (s *SSO) login(w http.ResponseWriter, r *http.Request) {
	state, nonce, verifier := random(), random(), oauth2.GenerateVerifier()
	now := s.Clock.Now()
	s.mu.Lock()
	// Pending sign-ins are kept in the order they began: expired ones
	// leave from the front, and past maxPendingLogins the oldest gives way,
	// so anonymous calls cannot grow the map or make each call scan it.
	for len(s.loginOrder) > 0 {
		k := s.loginOrder[0]
		l, live := s.logins[k]
		if live && now.Sub(l.at) <= loginLife && len(s.loginOrder) < maxPendingLogins {
			break
		}
		delete(s.logins, k)
		s.loginOrder = s.loginOrder[1:]
	}
	s.logins[state] = login{nonce: nonce, verifier: verifier, at: now}
	s.loginOrder = append(s.loginOrder, state)
	s.mu.Unlock()
	// The state is also bound to this browser, so a sign-in started
	// elsewhere cannot be completed here (login CSRF).
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: state, Path: "/auth/", MaxAge: int(loginLife / time.Second),
		HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, s.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusFound)
}

func (s *SSO) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state := q.Get("state")
	s.mu.Lock()
	l, ok := s.logins[state]
	delete(s.logins, state) // a state is used once, whatever happens next
	s.mu.Unlock()
	c, err := r.Cookie(loginCookie)
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Path: "/auth/", MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode})
	switch {
	case state == "" || !ok || s.Clock.Now().Sub(l.at) > loginLife:
		refuse(w, http.StatusBadRequest, "invalid_sign_in_state", "this sign-in is unknown, used or expired; start again at /auth/login")
		return
	case err != nil || subtle.ConstantTimeCompare([]byte(c.Value), []byte(state)) != 1:
		refuse(w, http.StatusBadRequest, "invalid_sign_in_state", "this sign-in was started in another browser; start again at /auth/login")
		return
	case q.Get("error") != "":
		refuse(w, http.StatusUnauthorized, "sign_in_failed", "the issuer refused the sign-in")
		return
	}
	tok, err := s.oauth.Exchange(s.ctx, q.Get("code"), oauth2.VerifierOption(l.verifier))
	if err != nil {
		s.Logger.WarnContext(r.Context(), "oidc code exchange failed", "error", err)
		refuse(w, http.StatusUnauthorized, "sign_in_failed", "the issuer did not accept the code")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := s.idTokens.Verify(r.Context(), raw)
	if err != nil || subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(l.nonce)) != 1 {
		s.Logger.WarnContext(r.Context(), "oidc id token refused", "error", err)
		refuse(w, http.StatusUnauthorized, "sign_in_failed", "the issuer's ID token is not valid for this sign-in")
		return
	}
	id, ok := s.identity(idt)
	if !ok {
		refuse(w, http.StatusForbidden, "no_role", "signed in, but no role is mapped to you; ask an administrator")
		return
	}
	cookie := random()
	now := s.Clock.Now()
	s.mu.Lock()
	s.sessions[sha256.Sum256([]byte(cookie))] = &session{id: id, csrf: random(), created: now, seenAt: now}
	s.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: cookie, Path: "/", MaxAge: int(s.cfg.AbsoluteTimeout / time.Second),
		HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode})
	http.Redirect(w, r, "/dashboard/", http.StatusSeeOther)
}

// SessionResponse describes the caller's session; the dashboard sends
// CSRFToken in X-CSRF-Token with every write.
type SessionResponse struct {
	Subject       string `json:"subject"`
	Email         string `json:"email,omitempty"`
	Issuer        string `json:"issuer"`
	Role          string `json:"role"`
	CSRFToken     string `json:"csrf_token"`
	IdleExpiresAt int64  `json:"idle_expires_at_unix_secs"`
	ExpiresAt     int64  `json:"expires_at_unix_secs"`
}

func (s *SSO) sessionInfo(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(SessionCookie)
	var sess *session
	ok := err == nil
	if ok {
		sess, ok = s.session(c.Value)
	}
	if !ok {
		refuse(w, http.StatusUnauthorized, "not_signed_in", "not signed in")
		return
	}
	writeJSON(w, http.StatusOK, SessionResponse{Subject: sess.id.Subject, Email: sess.id.Email, Issuer: sess.id.Issuer, Role: string(sess.id.Role),
		CSRFToken: sess.csrf, IdleExpiresAt: sess.seenAt.Add(s.cfg.IdleTimeout).Unix(), ExpiresAt: sess.created.Add(s.cfg.AbsoluteTimeout).Unix()})
}

func (s *SSO) logout(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		refuse(w, http.StatusUnauthorized, "unauthorized", "not signed in")
		return
	}
	key := sha256.Sum256([]byte(c.Value))
	s.mu.Lock()
	sess, ok := s.sessions[key]
	if ok && subtle.ConstantTimeCompare([]byte(r.Header.Get(CSRFHeader)), []byte(sess.csrf)) == 1 {
		delete(s.sessions, key)
	} else {
		ok = false
	}
	s.mu.Unlock()
	if !ok {
		refuse(w, http.StatusUnauthorized, "unauthorized", "not signed in, or "+CSRFHeader+" missing")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode})
	w.WriteHeader(http.StatusNoContent)
}

// Sessions counts live sessions (for tests and status).
func (s *SSO) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

func refuse(w http.ResponseWriter, status int, code, msg string) {
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	b.Error.Code, b.Error.Message = code, msg
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
