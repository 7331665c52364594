// Package identity_test signs people in to the admin API through the
// simulated OIDC issuer (sim/idp) and tries forged, expired, foreign and
// replayed credentials against every kind of refusal: all refused,
// nothing changed.
package identity_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/sso"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/sim/idp"
)

var _ = flag.String("bin-dir", "", "unused here: the suite runs the admin API in-process")

const (
	clientID     = "pillar-admin"
	clientSecret = "client-secret-never-logged"
	breakGlass   = "break-glass-token"
)

type env struct {
	t     *testing.T
	idp   *idp.Issuer
	sso   *sso.SSO
	admin string // base URL of the admin listener
	clk   *fakeclock.Clock
}

func setup(t *testing.T) *env {
	t.Helper()
	clk := fakeclock.New(time.Unix(1763800000, 0))
	is := idp.New()
	is.SetClock(clk.Now)
	isrv := httptest.NewServer(is)
	t.Cleanup(isrv.Close)
	is.SetIssuer(isrv.URL)
	adm := httptest.NewUnstartedServer(nil)
	base := "http://" + adm.Listener.Addr().String()
	is.AddClient(idp.Client{ID: clientID, Secret: clientSecret, RedirectURIs: []string{base + "/auth/callback"}})
	for sub, groups := range map[string][]string{"alice": {"pillar-admins", "staff"}, "olga": {"pillar-ops"}, "vic": {"pillar-viewers"},
		"audrey": {"pillar-audit"}, "nobody": {"staff"}} {
		is.AddUser(idp.User{Subject: sub, Email: sub + "@example.com", Groups: groups})
	}
	s, err := sso.New(context.Background(), sso.Config{Issuer: isrv.URL, ClientID: clientID, ClientSecret: clientSecret, RedirectURL: base + "/auth/callback",
		Roles:       map[string]string{"pillar-admins": "admin", "pillar-ops": "operator", "pillar-viewers": "viewer", "pillar-audit": "auditor"},
		IdleTimeout: 30 * time.Minute, AbsoluteTimeout: 2 * time.Hour}, sso.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "p.db"), sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	box, _ := secret.New(make([]byte, 32))
	adm.Config.Handler = admin.New(admin.Deps{Store: st, Sealer: box, Clock: clk, SignIn: s.Handler(),
		Auth: []admin.Authenticator{admin.StaticToken{Token: breakGlass}, s}})
	adm.Start()
	t.Cleanup(adm.Close)
	return &env{t: t, idp: is, sso: s, admin: base, clk: clk}
}

// browser is a cookie-keeping client that stops at the dashboard.
type browser struct {
	c    *http.Client
	csrf string
}

func (e *env) browser() *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{c: &http.Client{Jar: jar, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if r.URL.Path == "/dashboard/" {
			return http.ErrUseLastResponse
		}
		return nil
	}}}
}

// signIn runs the whole authorization code flow as subject.
func (e *env) signIn(b *browser, subject string) *http.Response {
	e.t.Helper()
	e.idp.SignInAs(subject)
	res, err := b.c.Get(e.admin + "/auth/login")
	if err != nil {
		e.t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusSeeOther {
		var s sso.SessionResponse
		if r := e.call(b, "", "GET", "/auth/session", ""); r.status == 200 {
			json.Unmarshal(r.body, &s)
			b.csrf = s.CSRFToken
		}
	}
	return res
}

type answer struct {
	status int
	body   []byte
}

func (a answer) code() string {
	var b struct{ Error struct{ Code string } }
	json.Unmarshal(a.body, &b)
	return b.Error.Code
}

// call sends a request with the browser's cookies (b non-nil) or a Bearer.
func (e *env) call(b *browser, bearer, method, path, body string) answer {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.admin+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	c := http.DefaultClient
	if b != nil {
		c = b.c
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	res, err := c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, out}
}

func (e *env) withCSRF(b *browser, method, path, body string) answer {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.admin+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sso.CSRFHeader, b.csrf)
	res, err := b.c.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, out}
}

// state is everything a refused request must leave as it was.
func (e *env) state() string {
	e.t.Helper()
	ex := e.call(nil, breakGlass, "GET", "/admin/v1/export", "")
	au := e.call(nil, breakGlass, "GET", "/admin/v1/audit?limit=500", "")
	if ex.status != 200 || au.status != 200 {
		e.t.Fatalf("state: %d %d", ex.status, au.status)
	}
	var x map[string]any
	json.Unmarshal(ex.body, &x)
	delete(x, "exported_at_unix_secs")
	j, _ := json.Marshal(x)
	return string(j) + string(au.body)
}

// A person signs in through the issuer (code flow, PKCE, state, nonce)
// and acts in the role their groups map to: what the role may do passes,
// the rest is 403; a write without the CSRF header is refused; the audit
// trail names the person and the issuer; sign-out ends the session.
func TestSignInActsInTheMappedRole(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, c := range []struct {
		subject, role string
		mayWrite      bool
		mayAudit      bool
	}{{"alice", "admin", true, true}, {"olga", "operator", true, false}, {"vic", "viewer", false, false}, {"audrey", "auditor", false, true}} {
		b := e.browser()
		if res := e.signIn(b, c.subject); res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/dashboard/" {
			t.Fatalf("%s: sign-in ended with %d %s", c.subject, res.StatusCode, res.Header.Get("Location"))
		}
		for _, ck := range b.c.Jar.Cookies(mustURL(e.admin + "/")) {
			if ck.Name == sso.SessionCookie && b.csrf == "" {
				t.Fatalf("%s: no CSRF token for the session", c.subject)
			}
		}
		me := e.call(b, "", "GET", "/admin/v1/me", "")
		var m admin.MeResponse
		json.Unmarshal(me.body, &m)
		if me.status != 200 || string(m.Role) != c.role || m.Kind != "oidc" || m.Subject != c.subject || m.Email != c.subject+"@example.com" {
			t.Fatalf("%s: me %d %s", c.subject, me.status, me.body)
		}
		before := e.state()
		// Without the CSRF header a cookie does not authorise a write.
		if r := e.call(b, "", "POST", "/admin/v1/principals", `{"name":"no-csrf-`+c.subject+`","kind":"machine"}`); r.status != 401 {
			t.Fatalf("%s: write without CSRF: %d %s", c.subject, r.status, r.body)
		}
		if e.state() != before {
			t.Fatalf("%s: a refused write changed something", c.subject)
		}
		w := e.withCSRF(b, "POST", "/admin/v1/principals", `{"name":"by-`+c.subject+`","kind":"machine"}`)
		switch {
		case c.mayWrite && w.status != 201, !c.mayWrite && (w.status != 403 || w.code() != "forbidden"):
			t.Fatalf("%s: write %d %s", c.subject, w.status, w.body)
		}
		if a := e.call(b, "", "GET", "/admin/v1/audit", ""); (a.status == 200) != c.mayAudit {
			t.Fatalf("%s: audit %d", c.subject, a.status)
		}
		// Sign-out needs the CSRF token too, then the cookie is dead.
		if r := e.call(b, "", "POST", "/auth/logout", ""); r.status != 401 {
			t.Fatalf("%s: logout without CSRF: %d", c.subject, r.status)
		}
		if r := e.withCSRF(b, "POST", "/auth/logout", ""); r.status != 204 {
			t.Fatalf("%s: logout %d %s", c.subject, r.status, r.body)
		}
		if r := e.call(b, "", "GET", "/admin/v1/me", ""); r.status != 401 {
			t.Fatalf("%s: after sign-out: %d", c.subject, r.status)
		}
	}
	au := e.call(nil, breakGlass, "GET", "/admin/v1/audit?actor_kind=oidc", "")
	for _, want := range []string{`"subject":"alice"`, `"subject":"olga"`, `"issuer":"` + e.idp.Issuer() + `"`} {
		if !strings.Contains(string(au.body), want) {
			t.Fatalf("audit lacks %s: %s", want, au.body)
		}
	}
	if strings.Contains(string(au.body), `"subject":"vic"`) {
		t.Fatal("a viewer's refused write was audited as a change")
	}
}

// Someone the issuer knows but whose groups map to no role gets no
// session.
func TestSignInWithoutRoleGetsNoSession(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b := e.browser()
	res := e.signIn(b, "nobody")
	if res.StatusCode != http.StatusForbidden || e.sso.Sessions() != 0 {
		t.Fatalf("no role: %d, %d sessions", res.StatusCode, e.sso.Sessions())
	}
}

// A state is good for one callback, from the browser that started the
// sign-in: a replayed callback, one from another browser and a made-up
// state are refused and open no session.
func TestReplayedAndForeignStateRefused(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.idp.SignInAs("alice")
	b := e.browser()
	b.c.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		if r.URL.Path == "/auth/callback" {
			return http.ErrUseLastResponse
		}
		return nil
	}
	res, err := b.c.Get(e.admin + "/auth/login")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	callback := res.Header.Get("Location")
	if !strings.Contains(callback, "/auth/callback?") {
		t.Fatalf("issuer answered %d %s", res.StatusCode, callback)
	}
	// Another browser presenting the callback first: refused, and the
	// state is spent.
	other := e.browser()
	if r := e.call(other, "", "GET", strings.TrimPrefix(callback, e.admin), ""); r.status != 400 || r.code() != "invalid_sign_in_state" {
		t.Fatalf("foreign browser: %d %s", r.status, r.body)
	}
	if r := e.call(b, "", "GET", strings.TrimPrefix(callback, e.admin), ""); r.status != 400 || r.code() != "invalid_sign_in_state" {
		t.Fatalf("replayed state: %d %s", r.status, r.body)
	}
	if r := e.call(b, "", "GET", "/auth/callback?state=made-up&code=x", ""); r.status != 400 {
		t.Fatalf("made-up state: %d %s", r.status, r.body)
	}
	if n := e.sso.Sessions(); n != 0 {
		t.Fatalf("%d sessions opened", n)
	}
}

// Sessions end after the idle timeout without use and after the absolute
// timeout however busy.
func TestSessionTimeouts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	idle := e.browser()
	e.signIn(idle, "alice")
	e.clk.Advance(30 * time.Minute)
	if r := e.call(idle, "", "GET", "/admin/v1/me", ""); r.status != 401 {
		t.Fatalf("idle session: %d", r.status)
	}
	busy := e.browser()
	e.signIn(busy, "alice")
	for range 7 { // 7 × 17 min = 119 min: within both timeouts
		e.clk.Advance(17 * time.Minute)
		if r := e.call(busy, "", "GET", "/admin/v1/me", ""); r.status != 200 {
			t.Fatalf("busy session ended early: %d", r.status)
		}
	}
	e.clk.Advance(2 * time.Minute)
	if r := e.call(busy, "", "GET", "/admin/v1/me", ""); r.status != 401 {
		t.Fatalf("past the absolute timeout: %d", r.status)
	}
}

// The issuer's access tokens are Bearer credentials for automation; a
// forged, expired, wrong-audience or foreign-issuer token is refused and
// changes nothing; a rotated signing key is followed, and a token signed
// by a key the issuer no longer publishes is refused.
func TestAccessTokens(t *testing.T) {
	t.Parallel()
	e := setup(t)
	good := e.idp.AccessToken("olga", time.Hour)
	if r := e.call(nil, good, "GET", "/admin/v1/me", ""); r.status != 200 || !strings.Contains(string(r.body), `"role":"operator"`) {
		t.Fatalf("access token: %d %s", r.status, r.body)
	}
	forger, _ := rsa.GenerateKey(rand.Reader, 2048)
	expired := e.idp.Claims("alice", clientID, time.Hour)
	expired["exp"] = e.clk.Now().Add(-time.Minute).Unix()
	foreign := idp.New()
	fsrv := httptest.NewServer(foreign)
	defer fsrv.Close()
	foreign.SetIssuer(fsrv.URL)
	foreign.AddUser(idp.User{Subject: "alice", Groups: []string{"pillar-admins"}})
	foreign.AddClient(idp.Client{ID: clientID})
	noRole := e.idp.AccessToken("nobody", time.Hour)
	var header map[string]any
	json.Unmarshal(decodeSegment(t, strings.Split(good, ".")[0]), &header)
	refused := map[string]string{
		"forged":         idp.SignWith(forger, header["kid"].(string), e.idp.Claims("alice", clientID, time.Hour)),
		"expired":        e.idp.Sign(expired),
		"wrong audience": e.idp.Sign(e.idp.Claims("alice", "another-client", time.Hour)),
		"foreign issuer": foreign.AccessToken("alice", time.Hour),
		"no role":        noRole,
		"not a JWT":      "eyJhbGciOiJub25lIn0.e30.",
	}
	before := e.state()
	for name, tok := range refused {
		if r := e.call(nil, tok, "POST", "/admin/v1/principals", `{"name":"`+strings.ReplaceAll(name, " ", "-")+`","kind":"machine"}`); r.status != 401 {
			t.Errorf("%s token: %d %s", name, r.status, r.body)
		}
	}
	if e.state() != before {
		t.Fatal("a refused token changed something")
	}
	// Rotation: the new key signs, the old one is still published.
	e.idp.Rotate(true)
	// The gateway fetches the key set again at most every 10 s.
	e.clk.Advance(11 * time.Second)
	rotated := e.idp.AccessToken("alice", time.Hour)
	for name, tok := range map[string]string{"new key": rotated, "previous key": good} {
		if r := e.call(nil, tok, "GET", "/admin/v1/me", ""); r.status != 200 {
			t.Fatalf("%s during rotation: %d", name, r.status)
		}
	}
	// The old key withdrawn: tokens it signed are refused.
	e.idp.Rotate(false)
	e.clk.Advance(11 * time.Second)
	fresh := e.idp.AccessToken("alice", time.Hour)
	if r := e.call(nil, fresh, "GET", "/admin/v1/me", ""); r.status != 200 {
		t.Fatalf("after rotation: %d", r.status)
	}
	if r := e.call(nil, rotated, "POST", "/admin/v1/principals", `{"name":"withdrawn","kind":"machine"}`); r.status != 401 {
		t.Fatalf("a withdrawn key's token: %d", r.status)
	}
	if r := e.call(nil, fresh, "POST", "/admin/v1/principals", `{"name":"by-token","kind":"machine"}`); r.status != 201 {
		t.Fatalf("write with a valid access token: %d %s", r.status, r.body)
	}
}

func mustURL(s string) *url.URL { u, _ := url.Parse(s); return u }

func decodeSegment(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
