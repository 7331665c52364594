package provider

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

var simStart = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type oauthEnv struct {
	p   *Provider
	srv *httptest.Server
}

func newOAuthEnv(t *testing.T, o Options) *oauthEnv {
	t.Helper()
	o.Now = simStart
	p := New(o)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return &oauthEnv{p: p, srv: srv}
}

func (e *oauthEnv) do(t *testing.T, method, path string, body string, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, r)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

const verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"

func challenge(v string) string {
	s := sha256.Sum256([]byte(v))
	return base64.RawURLEncoding.EncodeToString(s[:])
}

// authorize returns the code of a plain GET authorization.
func (e *oauthEnv) authorize(t *testing.T, account string) string {
	t.Helper()
	q := url.Values{"response_type": {"code"}, "client_id": {"cli"}, "redirect_uri": {"https://cb.example/done?x=1"},
		"scope": {"user:inference"}, "state": {"st"}, "code_challenge": {challenge(verifier)}, "code_challenge_method": {"S256"}, "code": {"true"}}
	if account != "" {
		q.Set("sim_account", account)
	}
	st, h, b := e.do(t, "GET", "/oauth/authorize?"+q.Encode(), "")
	if st != 302 {
		t.Fatalf("authorize: %d %s", st, b)
	}
	loc, _ := url.Parse(h.Get("Location"))
	if loc.Host != "cb.example" || loc.Query().Get("state") != "st" || loc.Query().Get("x") != "1" {
		t.Fatalf("redirect %s", loc)
	}
	return loc.Query().Get("code")
}

type tokens struct {
	Access    string `json:"access_token"`
	Refresh   string `json:"refresh_token"`
	ExpiresIn int64  `json:"expires_in"`
	Scope     string `json:"scope"`
	Account   struct {
		UUID string `json:"uuid"`
	} `json:"account"`
}

func (e *oauthEnv) exchange(t *testing.T, code, v string) (int, tokens) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"grant_type": "authorization_code", "code": code, "code_verifier": v,
		"redirect_uri": "https://cb.example/done?x=1", "client_id": "cli", "state": "st"})
	st, _, b := e.do(t, "POST", "/v1/oauth/token", string(body))
	var tk tokens
	json.Unmarshal(b, &tk)
	return st, tk
}

func TestAuthorizeRefusals(t *testing.T) {
	e := newOAuthEnv(t, Options{})
	for _, q := range []string{"response_type=token&client_id=c&redirect_uri=https://x/&code_challenge=a&code_challenge_method=S256",
		"response_type=code&redirect_uri=https://x/&code_challenge=a&code_challenge_method=S256",
		"response_type=code&client_id=c&code_challenge=a&code_challenge_method=S256",
		"response_type=code&client_id=c&redirect_uri=https://x/&code_challenge=a&code_challenge_method=plain",
		"response_type=code&client_id=c&redirect_uri=https://x/&code_challenge_method=S256"} {
		st, _, b := e.do(t, "GET", "/oauth/authorize?"+q, "")
		if st != 400 || !strings.Contains(string(b), `"error":"invalid_request"`) {
			t.Errorf("%s: %d %s", q, st, b)
		}
	}
}

func TestTokenExchangeAndRefresh(t *testing.T) {
	e := newOAuthEnv(t, Options{OAuthTokenTTL: time.Hour})
	// Wrong verifier: invalid_grant, and the code is gone.
	code := e.authorize(t, "alice")
	if st, _ := e.exchange(t, code, "wrong-verifier-wrong-verifier-wrong-verifier"); st != 400 {
		t.Fatalf("bad PKCE: %d", st)
	}
	if st, _ := e.exchange(t, code, verifier); st != 400 {
		t.Fatal("a code was usable after a refused exchange")
	}
	code = e.authorize(t, "alice")
	st, tk := e.exchange(t, code, verifier)
	if st != 200 || !strings.HasPrefix(tk.Access, "sk-ant-oat01-sim-") || !strings.HasPrefix(tk.Refresh, "sk-ant-ort01-sim-") ||
		tk.ExpiresIn != 3600 || !strings.Contains(tk.Scope, "user:inference") || tk.Account.UUID != e.p.Account("alice").UUID {
		t.Fatalf("exchange: %d %+v", st, tk)
	}
	if st, _ := e.exchange(t, code, verifier); st != 400 {
		t.Fatal("a code was used twice")
	}
	// Expired codes.
	code = e.authorize(t, "alice")
	e.p.Advance(11 * time.Minute)
	if st, _ := e.exchange(t, code, verifier); st != 400 {
		t.Fatal("an expired code was accepted")
	}
	// Refresh rotates.
	refresh := func(rt string) (int, tokens) {
		body, _ := json.Marshal(map[string]string{"grant_type": "refresh_token", "refresh_token": rt, "client_id": "cli"})
		st, _, b := e.do(t, "POST", "/v1/oauth/token", string(body))
		var out tokens
		json.Unmarshal(b, &out)
		return st, out
	}
	st, tk2 := refresh(tk.Refresh)
	if st != 200 || tk2.Access == tk.Access || tk2.Refresh == tk.Refresh {
		t.Fatalf("refresh: %d %+v", st, tk2)
	}
	if st, _ := refresh(tk.Refresh); st != 400 {
		t.Fatal("a rotated refresh token was accepted")
	}
	acct := e.p.Account("alice")
	if acct.TokenGrants != 1 || acct.RefreshGrants != 1 {
		t.Fatalf("grants %+v", acct)
	}
	if st, _, b := e.do(t, "POST", "/v1/oauth/token", `{"grant_type":"password"}`); st != 400 || !strings.Contains(string(b), "unsupported_grant_type") {
		t.Fatalf("unknown grant: %d %s", st, b)
	}
	// Access tokens expire on the sim's clock.
	msg := `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hello there"}]}`
	bearer := func(tok string) []string {
		return []string{"Authorization", "Bearer " + tok, "anthropic-version", "2023-06-01", "anthropic-beta", "x," + OAuthBeta}
	}
	if st, _, b := e.do(t, "POST", "/v1/messages", msg, bearer(tk2.Access)...); st != 200 {
		t.Fatalf("bearer request: %d %s", st, b)
	}
	e.p.Advance(time.Hour)
	if st, _, _ := e.do(t, "POST", "/v1/messages", msg, bearer(tk2.Access)...); st != 401 {
		t.Fatal("an expired token was accepted")
	}
}

func (e *oauthEnv) connect(t *testing.T, account string) string {
	t.Helper()
	_, tk := e.exchange(t, e.authorize(t, account), verifier)
	return tk.Access
}

func TestBearerNeedsBeta(t *testing.T) {
	e := newOAuthEnv(t, Options{})
	tok := e.connect(t, "")
	msg := `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	st, _, b := e.do(t, "POST", "/v1/messages", msg, "Authorization", "Bearer "+tok, "anthropic-version", "2023-06-01")
	if st != 401 || !strings.Contains(string(b), "OAuth authentication is currently not supported") {
		t.Fatalf("without beta: %d %s", st, b)
	}
	if st, _, _ := e.do(t, "POST", "/v1/messages", msg, "Authorization", "Bearer nope", "anthropic-version", "2023-06-01", "anthropic-beta", OAuthBeta); st != 401 {
		t.Fatal("an unknown token was accepted")
	}
	// count_tokens is not billable.
	if st, _, _ := e.do(t, "POST", "/v1/messages/count_tokens", msg, "Authorization", "Bearer "+tok, "anthropic-version", "2023-06-01", "anthropic-beta", OAuthBeta); st != 200 {
		t.Fatal("count_tokens with a bearer token failed")
	}
	if a := e.p.Account(DefaultOAuthAccount); a.Billable != 0 || a.FiveHour.Active {
		t.Fatalf("count_tokens billed: %+v", a)
	}
}

func TestWindows(t *testing.T) {
	e := newOAuthEnv(t, Options{FiveHourTokenLimit: 100, SevenDayTokenLimit: 1000})
	tok := e.connect(t, "bob")
	hdr := []string{"Authorization", "Bearer " + tok, "anthropic-version", "2023-06-01", "anthropic-beta", OAuthBeta}
	// 10 words in, max_tokens 10 out: 20 tokens per request.
	msg := `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"one two three four five six seven eight nine ten"}]}`
	st, h, _ := e.do(t, "POST", "/v1/messages", msg, hdr...)
	if st != 200 || h.Get("anthropic-ratelimit-unified-status") != "allowed" || h.Get("anthropic-ratelimit-unified-5h-utilization") != "0.2" ||
		h.Get("anthropic-ratelimit-unified-7d-utilization") != "0.02" {
		t.Fatalf("first request: %d %v", st, h)
	}
	reset5 := simStart.Add(5 * time.Hour).Unix()
	if h.Get("anthropic-ratelimit-unified-5h-reset") != itoa(reset5) || h.Get("anthropic-ratelimit-unified-reset") != itoa(reset5) {
		t.Fatalf("reset headers %v", h)
	}
	// The window opened at the first request and does not move.
	e.p.Advance(time.Hour)
	for range 3 {
		e.do(t, "POST", "/v1/messages", msg, hdr...)
	}
	_, h, _ = e.do(t, "POST", "/v1/messages", msg, hdr...)
	if h.Get("anthropic-ratelimit-unified-status") != "rejected" || h.Get("anthropic-ratelimit-unified-5h-reset") != itoa(reset5) {
		t.Fatalf("at 100%%: %v", h)
	}
	st, h, b := e.do(t, "POST", "/v1/messages", msg, hdr...)
	if st != 429 || !strings.Contains(string(b), "rate_limit_error") || h.Get("anthropic-ratelimit-unified-status") != "rejected" {
		t.Fatalf("exhausted: %d %s", st, b)
	}
	a := e.p.Account("bob")
	if a.Billable != 5 || !a.FiveHour.Active || a.FiveHour.Utilization != 100 {
		t.Fatalf("account %+v", a)
	}
	// The window ends at its reset and stays closed until new activity.
	e.p.Advance(4 * time.Hour)
	if a := e.p.Account("bob"); a.FiveHour.Active || a.FiveHour.Utilization != 0 || !a.SevenDay.Active {
		t.Fatalf("after the reset %+v", a)
	}
	st, h, _ = e.do(t, "POST", "/v1/messages", msg, hdr...)
	if st != 200 || h.Get("anthropic-ratelimit-unified-5h-reset") != itoa(e.p.Now().Add(5*time.Hour).Unix()) {
		t.Fatalf("new window: %d %v", st, h)
	}
	// Seven days exhausted by the control API: 429 too.
	e.p.SetAccount("bob", AccountUpdate{SevenDayUtilization: ptr(100.0)})
	if st, _, _ := e.do(t, "POST", "/v1/messages", msg, hdr...); st != 429 {
		t.Fatal("an exhausted seven-day window served")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func ptr[T any](v T) *T { return &v }

func TestUsageAndCoupons(t *testing.T) {
	e := newOAuthEnv(t, Options{})
	tok := e.connect(t, "carol")
	bearer := []string{"Authorization", "Bearer " + tok, "anthropic-beta", OAuthBeta}
	st, _, b := e.do(t, "GET", "/api/oauth/usage", "", bearer...)
	var u map[string]any
	json.Unmarshal(b, &u)
	if st != 200 || u["limit_reset_coupon"] != nil || u["five_hour"].(map[string]any)["resets_at"] != nil || u["extra_usage"] == nil {
		t.Fatalf("usage without cedar_ember: %d %s", st, b)
	}
	e.p.SetAccount("carol", AccountUpdate{CouponAvailable: ptr(true), FiveHourUtilization: ptr(50.0)})
	_, _, b = e.do(t, "GET", "/api/oauth/usage?cedar_ember=1", "", bearer...)
	json.Unmarshal(b, &u)
	c := u["limit_reset_coupon"].(map[string]any)
	if c["available"] != true || c["coupon_id"] == nil || u["five_hour"].(map[string]any)["utilization"] != 50.0 {
		t.Fatalf("usage with cedar_ember: %s", b)
	}
	if e.p.Account("carol").SkipSpendSeen {
		t.Fatal("skip_spend seen without being sent")
	}
	e.do(t, "GET", "/api/oauth/usage?cedar_ember=1&skip_spend=1", "", bearer...)
	if a := e.p.Account("carol"); !a.SkipSpendSeen || a.UsagePolls != 3 {
		t.Fatalf("polls %+v", a)
	}
	if st, _, _ := e.do(t, "GET", "/api/oauth/usage", ""); st != 401 {
		t.Fatal("usage without a token")
	}
	// Profile.
	_, _, b = e.do(t, "GET", "/api/oauth/profile", "", bearer...)
	if !strings.Contains(string(b), e.p.Account("carol").UUID) {
		t.Fatalf("profile %s", b)
	}
	// A wrong coupon id: 409, nothing reset.
	id := c["coupon_id"].(string)
	if st, _, b := e.do(t, "POST", "/api/oauth/usage/limit_reset", `{"coupon_id":"cpn_other"}`, bearer...); st != 409 || !strings.Contains(string(b), "coupon_unavailable") {
		t.Fatalf("wrong coupon: %d %s", st, b)
	}
	// Lost response: the claim applies, the answer never comes.
	e.p.AddFault(Fault{Path: "/api/oauth/usage/limit_reset", Count: 1, LostResponse: true})
	if st, _, _ := e.do(t, "POST", "/api/oauth/usage/limit_reset", `{"coupon_id":"`+id+`"}`, bearer...); st != 0 {
		t.Fatalf("lost response answered %d", st)
	}
	a := e.p.Account("carol")
	if a.ClaimsApplied != 1 || a.ClaimPosts != 2 || a.Coupon.Available || a.FiveHour.Active {
		t.Fatalf("after the lost claim %+v", a)
	}
	// A second coupon, a 5xx fault: not applied.
	e.p.SetAccount("carol", AccountUpdate{CouponAvailable: ptr(true)})
	id2 := *e.p.Account("carol").Coupon.CouponID
	if id2 == id {
		t.Fatal("coupon ids repeat")
	}
	e.p.AddFault(Fault{Path: "/api/oauth/usage/limit_reset", Count: 1, Status: 503})
	if st, _, _ := e.do(t, "POST", "/api/oauth/usage/limit_reset", `{"coupon_id":"`+id2+`"}`, bearer...); st != 503 {
		t.Fatal("5xx fault not served")
	}
	if !e.p.Account("carol").Coupon.Available {
		t.Fatal("a 5xx claim applied")
	}
	st, _, b = e.do(t, "POST", "/api/oauth/usage/limit_reset", `{"coupon_id":"`+id2+`"}`, bearer...)
	if st != 200 || !strings.Contains(string(b), `"reset":true`) || e.p.Account("carol").ClaimsApplied != 2 {
		t.Fatalf("claim: %d %s", st, b)
	}
}

func TestAccountControlAPI(t *testing.T) {
	e := newOAuthEnv(t, Options{})
	reset := simStart.Add(30 * time.Hour).UTC()
	st, _, b := e.do(t, "POST", "/_sim/accounts/dave", `{"seven_day_utilization":100,"seven_day_resets_at":"`+reset.Format(time.RFC3339)+`","extra_usage_enabled":true}`)
	var a AccountState
	json.Unmarshal(b, &a)
	if st != 200 || !a.SevenDay.Active || !a.SevenDay.ResetsAt.Equal(reset) || a.SevenDay.Utilization != 100 || !a.ExtraUsage {
		t.Fatalf("set: %d %s", st, b)
	}
	if st, _, _ := e.do(t, "POST", "/_sim/accounts/dave", `{"nope":1}`); st != 400 {
		t.Fatal("unknown update field accepted")
	}
	_, _, b = e.do(t, "GET", "/_sim/accounts", "")
	if !strings.Contains(string(b), `"id":"dave"`) {
		t.Fatalf("list %s", b)
	}
	tok := e.connect(t, "dave")
	if st, _, _ := e.do(t, "POST", "/_sim/oauth/revoke", `{"account":"dave"}`); st != 204 {
		t.Fatal("revoke")
	}
	if st, _, _ := e.do(t, "GET", "/api/oauth/profile", "", "Authorization", "Bearer "+tok); st != 401 {
		t.Fatal("a revoked token still works")
	}
	e.do(t, "POST", "/_sim/reset", "")
	_, _, b = e.do(t, "GET", "/_sim/accounts", "")
	if string(b) != "[]" {
		t.Fatalf("reset kept accounts: %s", b)
	}
}
