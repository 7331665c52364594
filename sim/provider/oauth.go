package provider

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The subscription side of the provider: an OAuth authorization server
// (authorization code with PKCE S256, rotating refresh tokens), accounts
// with a five-hour and a seven-day usage window on the sim's clock, the
// usage endpoint with reset-coupon status, and coupon claims.

// OAuthBeta is the beta flag the API requires with OAuth bearer tokens.
const OAuthBeta = "oauth-2025-04-20"

// DefaultOAuthAccount is the account a plain authorization is granted for.
const DefaultOAuthAccount = "acct_oauth_1"

const (
	codeTTL        = 10 * time.Minute
	fiveHourSpan   = 5 * time.Hour
	sevenDaySpan   = 7 * 24 * time.Hour
	defaultTokTTL  = 8 * time.Hour
	warningPercent = 80
)

type authCode struct {
	account, clientID, redirect, challenge string
	expires                                time.Time
}

type accessToken struct {
	account string
	expires time.Time
}

type refreshToken struct {
	account, clientID string
}

// window is one usage window; zero start means none is open.
type window struct {
	start time.Time
	span  time.Duration
	used  float64 // percent
}

func (w *window) active(now time.Time) bool {
	return !w.start.IsZero() && now.Before(w.start.Add(w.span))
}

// roll closes a window that has run out.
func (w *window) roll(now time.Time) {
	if !w.start.IsZero() && !now.Before(w.start.Add(w.span)) {
		w.start, w.used = time.Time{}, 0
	}
}

func (w *window) resetsAt(now time.Time) *time.Time {
	if !w.active(now) {
		return nil
	}
	t := w.start.Add(w.span).UTC()
	return &t
}

// subscription is an OAuth account's provider-side state.
type subscription struct {
	name, uuid, orgUUID string
	fiveHour, sevenDay  window
	couponAvailable     bool
	couponID            string
	couponExpires       time.Time
	extraUsage          bool
	usagePolls          int
	skipSpendSeen       bool
	claimsApplied       int
	claimPosts          int
	billable            int
	profileRequests     int
	tokenGrants         int
	refreshGrants       int
	lastCouponSerial    int
}

func (s *subscription) roll(now time.Time) {
	s.fiveHour.roll(now)
	s.sevenDay.roll(now)
	if s.couponAvailable && !s.couponExpires.IsZero() && !now.Before(s.couponExpires) {
		s.couponAvailable, s.couponID = false, ""
	}
}

func randomToken(prefix string) string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

func stableUUID(kind, name string) string {
	h := sha256.Sum256([]byte(kind + ":" + name))
	x := hex.EncodeToString(h[:16])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// subLocked returns an OAuth account's state, creating it on first use.
func (p *Provider) subLocked(name string) *subscription {
	s := p.subs[name]
	if s == nil {
		s = &subscription{name: name, uuid: stableUUID("account", name), orgUUID: stableUUID("org", name),
			fiveHour: window{span: fiveHourSpan}, sevenDay: window{span: sevenDaySpan}}
		p.subs[name] = s
	}
	return s
}

func oauthError(w http.ResponseWriter, status int, code, desc string) {
	b, _ := json.Marshal(map[string]string{"error": code, "error_description": desc})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// authorize approves a plain GET at once and redirects with the code.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	redirect, err := url.Parse(q.Get("redirect_uri"))
	switch {
	case q.Get("response_type") != "code":
		oauthError(w, 400, "invalid_request", "response_type must be code")
		return
	case q.Get("client_id") == "":
		oauthError(w, 400, "invalid_request", "client_id is required")
		return
	case q.Get("redirect_uri") == "" || err != nil || !redirect.IsAbs():
		oauthError(w, 400, "invalid_request", "redirect_uri must be an absolute URL")
		return
	case q.Get("code_challenge_method") != "S256":
		oauthError(w, 400, "invalid_request", "code_challenge_method must be S256")
		return
	case q.Get("code_challenge") == "":
		oauthError(w, 400, "invalid_request", "code_challenge is required")
		return
	}
	account := q.Get("sim_account")
	if account == "" {
		account = DefaultOAuthAccount
	}
	code := randomToken("sim-code-")
	p.mu.Lock()
	p.subLocked(account)
	p.codes[code] = &authCode{account: account, clientID: q.Get("client_id"), redirect: q.Get("redirect_uri"),
		challenge: q.Get("code_challenge"), expires: p.clock.now().Add(codeTTL)}
	p.mu.Unlock()
	rq := redirect.Query()
	rq.Set("code", code)
	rq.Set("state", q.Get("state"))
	redirect.RawQuery = rq.Encode()
	http.Redirect(w, r, redirect.String(), http.StatusFound)
}

// token serves the code exchange and the refresh grant.
func (p *Provider) token(w http.ResponseWriter, r *http.Request, body []byte) {
	f := map[string]string{}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		vals, err := url.ParseQuery(string(body))
		if err != nil {
			oauthError(w, 400, "invalid_request", "malformed form body")
			return
		}
		for k := range vals {
			f[k] = vals.Get(k)
		}
	} else if err := json.Unmarshal(body, &f); err != nil {
		oauthError(w, 400, "invalid_request", "body must be a JSON object of strings")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.now()
	var account string
	switch f["grant_type"] {
	case "authorization_code":
		c := p.codes[f["code"]]
		delete(p.codes, f["code"]) // single use, even when refused
		sum := sha256.Sum256([]byte(f["code_verifier"]))
		switch {
		case c == nil || !now.Before(c.expires):
			oauthError(w, 400, "invalid_grant", "unknown, used or expired authorization code")
			return
		case base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge:
			oauthError(w, 400, "invalid_grant", "code_verifier does not match the code_challenge")
			return
		case f["redirect_uri"] != c.redirect || f["client_id"] != c.clientID:
			oauthError(w, 400, "invalid_grant", "redirect_uri or client_id differ from the authorization request")
			return
		}
		account = c.account
		p.subLocked(account).tokenGrants++
	case "refresh_token":
		rt := p.refreshes[f["refresh_token"]]
		if rt == nil || rt.clientID != f["client_id"] {
			oauthError(w, 400, "invalid_grant", "unknown, rotated or revoked refresh token")
			return
		}
		delete(p.refreshes, f["refresh_token"]) // rotation: the old one is dead
		account = rt.account
		p.subLocked(account).refreshGrants++
	default:
		oauthError(w, 400, "unsupported_grant_type", "grant_type must be authorization_code or refresh_token")
		return
	}
	ttl := p.opts.OAuthTokenTTL
	if ttl <= 0 {
		ttl = defaultTokTTL
	}
	access, refresh := randomToken("sk-ant-oat01-sim-"), randomToken("sk-ant-ort01-sim-")
	p.tokens[access] = &accessToken{account: account, expires: now.Add(ttl)}
	p.refreshes[refresh] = &refreshToken{account: account, clientID: f["client_id"]}
	s := p.subLocked(account)
	writeJSON(w, map[string]any{"token_type": "Bearer", "access_token": access, "refresh_token": refresh,
		"expires_in": int64(ttl / time.Second), "scope": "user:inference user:profile",
		"account":      map[string]string{"uuid": s.uuid, "email_address": s.name + "@sim.invalid"},
		"organization": map[string]string{"uuid": s.orgUUID, "name": "Sim Org"}})
}

// bearerAccount resolves an OAuth access token to its account ("" when the
// token is unknown or expired).
func (p *Provider) bearerAccountLocked(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) < 8 || !strings.EqualFold(a[:7], "bearer ") {
		return ""
	}
	t := p.tokens[strings.TrimSpace(a[7:])]
	if t == nil || !p.clock.now().Before(t.expires) {
		return ""
	}
	return t.account
}

func hasOAuthBeta(r *http.Request) bool {
	for _, v := range r.Header.Values("Anthropic-Beta") {
		for _, b := range strings.Split(v, ",") {
			if strings.TrimSpace(b) == OAuthBeta {
				return true
			}
		}
	}
	return false
}

// oauthSub authenticates an account endpoint's bearer token.
func (p *Provider) oauthSub(w http.ResponseWriter, r *http.Request) (*subscription, time.Time, bool) {
	p.mu.Lock()
	name := p.bearerAccountLocked(r)
	p.mu.Unlock()
	if name == "" {
		apiError(w, http.StatusUnauthorized, "authentication_error", "invalid or expired OAuth token")
		return nil, time.Time{}, false
	}
	p.mu.Lock()
	now := p.clock.now()
	s := p.subLocked(name)
	s.roll(now)
	p.mu.Unlock()
	return s, now, true
}

func (p *Provider) profile(w http.ResponseWriter, r *http.Request) {
	s, _, ok := p.oauthSub(w, r)
	if !ok {
		return
	}
	p.mu.Lock()
	s.profileRequests++
	body := map[string]any{"account": map[string]string{"uuid": s.uuid, "email": s.name + "@sim.invalid", "display_name": s.name},
		"organization": map[string]string{"uuid": s.orgUUID, "name": "Sim Org"}}
	p.mu.Unlock()
	writeJSON(w, body)
}

func windowJSON(w *window, now time.Time) map[string]any {
	if !w.active(now) {
		return map[string]any{"utilization": 0, "resets_at": nil}
	}
	return map[string]any{"utilization": w.used, "resets_at": w.resetsAt(now).Format(time.RFC3339)}
}

func (p *Provider) usageLocked(s *subscription, now time.Time, coupon bool) map[string]any {
	body := map[string]any{"five_hour": windowJSON(&s.fiveHour, now), "seven_day": windowJSON(&s.sevenDay, now), "seven_day_opus": nil,
		"extra_usage": map[string]any{"is_enabled": s.extraUsage, "monthly_limit": nil, "used_credits": nil, "utilization": nil}}
	if coupon {
		c := map[string]any{"available": s.couponAvailable, "coupon_id": nil, "expires_at": nil}
		if s.couponAvailable {
			c["coupon_id"] = s.couponID
			if !s.couponExpires.IsZero() {
				c["expires_at"] = s.couponExpires.UTC().Format(time.RFC3339)
			}
		}
		body["limit_reset_coupon"] = c
	}
	return body
}

func (p *Provider) usageEndpoint(w http.ResponseWriter, r *http.Request) {
	s, now, ok := p.oauthSub(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	p.mu.Lock()
	s.usagePolls++
	if q.Has("skip_spend") {
		s.skipSpendSeen = true
	}
	body := p.usageLocked(s, now, q.Get("cedar_ember") == "1")
	p.mu.Unlock()
	writeJSON(w, body)
}

// claim resets the windows with the account's coupon.
func (p *Provider) claim(w http.ResponseWriter, r *http.Request, body []byte) {
	s, now, ok := p.oauthSub(w, r)
	if !ok {
		return
	}
	var b struct {
		CouponID string `json:"coupon_id"`
	}
	_ = json.Unmarshal(body, &b)
	p.mu.Lock()
	s.claimPosts++
	if !s.couponAvailable || b.CouponID == "" || b.CouponID != s.couponID {
		p.mu.Unlock()
		apiError(w, http.StatusConflict, "coupon_unavailable", "no such reset coupon is available for this account")
		return
	}
	s.couponAvailable, s.couponID = false, ""
	s.fiveHour = window{span: fiveHourSpan}
	s.sevenDay = window{span: sevenDaySpan}
	s.claimsApplied++
	out := map[string]any{"reset": true, "five_hour": windowJSON(&s.fiveHour, now), "seven_day": windowJSON(&s.sevenDay, now)}
	p.mu.Unlock()
	writeJSON(w, out)
}

// admitOAuth refuses a request of an exhausted account with 429 and the
// unified headers; otherwise it returns the account for charging.
func (p *Provider) admitOAuth(w http.ResponseWriter, name string) bool {
	p.mu.Lock()
	now := p.clock.now()
	s := p.subLocked(name)
	s.roll(now)
	exhausted := s.fiveHour.used >= 100 && s.fiveHour.active(now) || s.sevenDay.used >= 100 && s.sevenDay.active(now)
	setUnified(w.Header(), s, now)
	p.mu.Unlock()
	if exhausted {
		apiError(w, http.StatusTooManyRequests, "rate_limit_error", "This request would exceed your account's rate limit. Please try again later.")
		return false
	}
	return true
}

// chargeOAuth counts a served request against the account's windows,
// opening them on the first billable activity.
func (p *Provider) chargeOAuth(w http.ResponseWriter, name string, tokens int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.now()
	s := p.subLocked(name)
	s.roll(now)
	for _, win := range []*window{&s.fiveHour, &s.sevenDay} {
		if !win.active(now) {
			win.start, win.used = now, 0
		}
	}
	limit5, limit7 := p.opts.FiveHourTokenLimit, p.opts.SevenDayTokenLimit
	if limit5 <= 0 {
		limit5 = 100000
	}
	if limit7 <= 0 {
		limit7 = 1000000
	}
	s.fiveHour.used += float64(tokens) / float64(limit5) * 100
	s.sevenDay.used += float64(tokens) / float64(limit7) * 100
	s.billable++
	setUnified(w.Header(), s, now)
}

func setUnified(h http.Header, s *subscription, now time.Time) {
	status := "allowed"
	worst := 0.0
	for _, win := range []*window{&s.fiveHour, &s.sevenDay} {
		if win.active(now) && win.used > worst {
			worst = win.used
		}
	}
	switch {
	case worst >= 100:
		status = "rejected"
	case worst >= warningPercent:
		status = "allowed_warning"
	}
	h.Set("anthropic-ratelimit-unified-status", status)
	frac := func(w *window) string {
		if !w.active(now) {
			return "0"
		}
		return strconv.FormatFloat(w.used/100, 'f', -1, 64)
	}
	h.Set("anthropic-ratelimit-unified-5h-utilization", frac(&s.fiveHour))
	h.Set("anthropic-ratelimit-unified-7d-utilization", frac(&s.sevenDay))
	h.Del("anthropic-ratelimit-unified-5h-reset")
	h.Del("anthropic-ratelimit-unified-7d-reset")
	h.Del("anthropic-ratelimit-unified-reset")
	var earliest *time.Time
	if t := s.fiveHour.resetsAt(now); t != nil {
		h.Set("anthropic-ratelimit-unified-5h-reset", strconv.FormatInt(t.Unix(), 10))
		earliest = t
	}
	if t := s.sevenDay.resetsAt(now); t != nil {
		h.Set("anthropic-ratelimit-unified-7d-reset", strconv.FormatInt(t.Unix(), 10))
		if earliest == nil || t.Before(*earliest) {
			earliest = t
		}
	}
	if earliest != nil {
		h.Set("anthropic-ratelimit-unified-reset", strconv.FormatInt(earliest.Unix(), 10))
	}
}

// AccountState is an OAuth account as the control API shows it.
type AccountState struct {
	ID              string      `json:"id"`
	UUID            string      `json:"uuid"`
	FiveHour        WindowState `json:"five_hour"`
	SevenDay        WindowState `json:"seven_day"`
	Coupon          CouponState `json:"coupon"`
	ExtraUsage      bool        `json:"extra_usage_enabled"`
	UsagePolls      int         `json:"usage_polls"`
	SkipSpendSeen   bool        `json:"skip_spend_seen"`
	ClaimsApplied   int         `json:"claims_applied"`
	ClaimPosts      int         `json:"claim_posts"`
	Billable        int         `json:"billable_requests"`
	ProfileRequests int         `json:"profile_requests"`
	TokenGrants     int         `json:"token_grants"`
	RefreshGrants   int         `json:"refresh_grants"`
}

// WindowState is one usage window.
type WindowState struct {
	Utilization float64    `json:"utilization"`
	ResetsAt    *time.Time `json:"resets_at"`
	Active      bool       `json:"active"`
}

// CouponState is the account's reset coupon.
type CouponState struct {
	Available bool       `json:"available"`
	CouponID  *string    `json:"coupon_id"`
	ExpiresAt *time.Time `json:"expires_at"`
}

func (p *Provider) stateLocked(s *subscription) AccountState {
	now := p.clock.now()
	s.roll(now)
	win := func(w *window) WindowState {
		if !w.active(now) {
			return WindowState{}
		}
		return WindowState{Utilization: w.used, ResetsAt: w.resetsAt(now), Active: true}
	}
	st := AccountState{ID: s.name, UUID: s.uuid, FiveHour: win(&s.fiveHour), SevenDay: win(&s.sevenDay), ExtraUsage: s.extraUsage,
		UsagePolls: s.usagePolls, SkipSpendSeen: s.skipSpendSeen, ClaimsApplied: s.claimsApplied, ClaimPosts: s.claimPosts,
		Billable: s.billable, ProfileRequests: s.profileRequests, TokenGrants: s.tokenGrants, RefreshGrants: s.refreshGrants}
	if s.couponAvailable {
		id := s.couponID
		st.Coupon = CouponState{Available: true, CouponID: &id}
		if !s.couponExpires.IsZero() {
			t := s.couponExpires.UTC()
			st.Coupon.ExpiresAt = &t
		}
	}
	return st
}

// Account returns an OAuth account's state (created on first use).
func (p *Provider) Account(name string) AccountState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stateLocked(p.subLocked(name))
}

// Accounts lists the OAuth accounts.
func (p *Provider) Accounts() []AccountState {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []AccountState{}
	for _, s := range p.subs {
		out = append(out, p.stateLocked(s))
	}
	return out
}

// AccountUpdate changes an OAuth account; nil fields are kept.
type AccountUpdate struct {
	FiveHourUtilization *float64   `json:"five_hour_utilization"`
	SevenDayUtilization *float64   `json:"seven_day_utilization"`
	FiveHourResetsAt    *time.Time `json:"five_hour_resets_at"`
	SevenDayResetsAt    *time.Time `json:"seven_day_resets_at"`
	CouponAvailable     *bool      `json:"coupon_available"`
	CouponExpiresAt     *time.Time `json:"coupon_expires_at"`
	ExtraUsageEnabled   *bool      `json:"extra_usage_enabled"`
}

// SetAccount applies an update. Setting a utilization or a reset opens the
// window (at now, or so that it ends at the given reset).
func (p *Provider) SetAccount(name string, u AccountUpdate) AccountState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.now()
	s := p.subLocked(name)
	s.roll(now)
	set := func(w *window, util *float64, reset *time.Time) {
		if reset != nil {
			w.start = reset.Add(-w.span)
		} else if util != nil && !w.active(now) {
			w.start = now
		}
		if util != nil {
			w.used = *util
		}
	}
	set(&s.fiveHour, u.FiveHourUtilization, u.FiveHourResetsAt)
	set(&s.sevenDay, u.SevenDayUtilization, u.SevenDayResetsAt)
	if u.CouponAvailable != nil {
		s.couponAvailable = *u.CouponAvailable
		if s.couponAvailable {
			s.lastCouponSerial++
			s.couponID = fmt.Sprintf("cpn_%s_%d", s.uuid[:8], s.lastCouponSerial)
		} else {
			s.couponID = ""
		}
	}
	if u.CouponExpiresAt != nil {
		s.couponExpires = *u.CouponExpiresAt
	}
	if u.ExtraUsageEnabled != nil {
		s.extraUsage = *u.ExtraUsageEnabled
	}
	return p.stateLocked(s)
}

// RevokeOAuth invalidates every token of an account.
func (p *Provider) RevokeOAuth(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, t := range p.tokens {
		if t.account == name {
			delete(p.tokens, k)
		}
	}
	for k, t := range p.refreshes {
		if t.account == name {
			delete(p.refreshes, k)
		}
	}
}
