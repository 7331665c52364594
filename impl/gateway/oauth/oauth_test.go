package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// RFC 7636, appendix B.
func TestChallenge(t *testing.T) {
	if got := Challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"); got != "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM" {
		t.Fatalf("challenge %s", got)
	}
	if v := NewVerifier(); len(v) != 43 || v == NewVerifier() {
		t.Fatalf("verifier %q", v)
	}
}

// tokenServer checks PKCE and rotates refresh tokens.
type tokenServer struct {
	// before, when set, runs first on every request, outside the lock (a
	// test blocks or fails the endpoint there; true means answered).
	before    func(w http.ResponseWriter, r *http.Request) bool
	mu        sync.Mutex
	challenge string
	refresh   string
	n         int
	scope     string
	bodies    []map[string]string
}

func (s *tokenServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read the body first: the server notices a client that went away
	// (and cancels r.Context) only once the body is consumed.
	raw, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if s.before != nil && s.before(w, r) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var b map[string]string
	json.NewDecoder(r.Body).Decode(&b)
	s.bodies = append(s.bodies, b)
	fail := func() {
		w.WriteHeader(400)
		w.Write([]byte(`{"error":"invalid_grant","error_description":"nope"}`))
	}
	switch b["grant_type"] {
	case "authorization_code":
		if Challenge(b["code_verifier"]) != s.challenge || b["code"] != "the-code" {
			fail()
			return
		}
	case "refresh_token":
		if b["refresh_token"] != s.refresh {
			fail()
			return
		}
	default:
		fail()
		return
	}
	s.n++
	s.refresh = fmt.Sprintf("rt-%d", s.n)
	scope := s.scope
	if scope == "" {
		scope = "user:inference user:profile"
	}
	fmt.Fprintf(w, `{"token_type":"Bearer","access_token":"at-%d","refresh_token":%q,"expires_in":3600,"scope":%q,"account":{"uuid":"acct"},"organization":{"uuid":"org"}}`,
		s.n, s.refresh, scope)
}

type jobs struct {
	mu     sync.Mutex
	got    []scheduler.Enqueue
	family []scheduler.JobInfo
}

func (j *jobs) Enqueue(_ context.Context, e scheduler.Enqueue) (bool, int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.got = append(j.got, e)
	return true, 1, nil
}

func (j *jobs) Family(_ context.Context, jobType, prefix string) ([]scheduler.JobInfo, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []scheduler.JobInfo
	for _, f := range j.family {
		if f.Type == jobType && strings.HasPrefix(f.IdempotencyKey, prefix) {
			out = append(out, f)
		}
	}
	return out, nil
}

func setup(t *testing.T) (*Service, *tokenServer, *jobs, *store.Upstream, *bytes.Buffer) {
	t.Helper()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "o.db"), sqlite.Options{Clock: fakeclock.New(now)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ts := &tokenServer{}
	srv := httptest.NewServer(ts)
	t.Cleanup(srv.Close)
	box, _ := secret.New(bytes.Repeat([]byte{7}, 32))
	j := &jobs{}
	clk := service.Options{Clock: fakeclock.New(now)}
	s := service.Init(clk, &Service{Store: st, Box: box, Client: &Client{HTTP: srv.Client(), Clock: clk.Clock}, Jobs: j,
		RedirectURI: "https://cb.example/callback"})
	u, err := st.CreateUpstream(context.Background(), store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: "https://api.example",
		Enabled: true, WarmupEnabled: true, OAuthAuthorizeURL: srv.URL + "/authorize", OAuthTokenURL: srv.URL + "/token"})
	if err != nil {
		t.Fatal(err)
	}
	return s, ts, j, u, &bytes.Buffer{}
}

// P-API-7: start, open the URL, complete with state and code; tokens sealed.
func TestFlow(t *testing.T) {
	s, ts, j, u, _ := setup(t)
	st, err := s.Start(context.Background(), u.ID)
	if err != nil {
		t.Fatal(err)
	}
	au, _ := url.Parse(st.AuthorizationURL)
	q := au.Query()
	if q.Get("code_challenge_method") != "S256" || q.Get("state") != st.State || q.Get("response_type") != "code" ||
		q.Get("client_id") != DefaultClientID || q.Get("redirect_uri") != "https://cb.example/callback" || !strings.Contains(q.Get("scope"), InferenceScope) {
		t.Fatalf("authorization url %s", st.AuthorizationURL)
	}
	ts.challenge = q.Get("code_challenge")
	// Another upstream's state, or a forged one, is refused.
	if _, _, err := s.Complete(context.Background(), "up_other", st.State, "the-code"); !errors.Is(err, ErrUnknownState) {
		t.Fatalf("state of another upstream: %v", err)
	}
	// The state was consumed by that attempt: start again.
	st, _ = s.Start(context.Background(), u.ID)
	ts.challenge = mustQuery(t, st.AuthorizationURL).Get("code_challenge")
	got, mode, err := s.Complete(context.Background(), u.ID, st.State, "the-code#"+st.State)
	if err != nil || mode != "oauth" || got.CredentialKind != "oauth" {
		t.Fatalf("complete: %v %q %+v", err, mode, got)
	}
	if bytes.Contains(got.Credential, []byte("at-1")) {
		t.Fatal("the token is stored in the clear")
	}
	tok, err := s.Token(got)
	if err != nil || tok.AccessToken != "at-1" || tok.RefreshToken != "rt-1" || tok.AccountUUID != "acct" {
		t.Fatalf("token %+v %v", tok, err)
	}
	if _, _, err := s.Complete(context.Background(), u.ID, st.State, "the-code"); !errors.Is(err, ErrUnknownState) {
		t.Fatalf("state reused: %v", err)
	}
	// The refresh is scheduled ahead of expiry under the version's key.
	if len(j.got) != 1 || j.got[0].IdempotencyKey != RefreshKey(u.ID, got.CredentialVersion) ||
		!j.got[0].RunAt.Equal(time.Unix(tok.ExpiresAt, 0).Add(-10*time.Minute)) {
		t.Fatalf("refresh job %+v", j.got)
	}
}

func mustQuery(t *testing.T, raw string) url.Values {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

func TestFlowRefusals(t *testing.T) {
	s, ts, _, u, _ := setup(t)
	st, _ := s.Start(context.Background(), u.ID)
	ts.challenge = "not-it"
	_, _, err := s.Complete(context.Background(), u.ID, st.State, "the-code")
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Code != "invalid_grant" || !pe.Permanent() {
		t.Fatalf("bad PKCE: %v", err)
	}
	st, _ = s.Start(context.Background(), u.ID)
	ts.challenge = mustQuery(t, st.AuthorizationURL).Get("code_challenge")
	ts.scope = "user:profile"
	if _, _, err := s.Complete(context.Background(), u.ID, st.State, "the-code"); !errors.Is(err, ErrScopeInsufficient) {
		t.Fatalf("no inference scope: %v", err)
	}
	key, _ := s.Store.CreateUpstream(context.Background(), store.UpstreamSpec{Name: "k", Kind: store.KindVendorAPIKey, BaseURL: "https://x.example"})
	if _, err := s.Start(context.Background(), key.ID); !errors.Is(err, ErrNotOAuth) {
		t.Fatalf("start on an API-key upstream: %v", err)
	}
}

// Refresh rotates the tokens of the current credential version only; a
// refused refresh is permanent and surfaces in the upstream's status.
func TestRefresh(t *testing.T) {
	s, ts, j, u, _ := setup(t)
	st, _ := s.Start(context.Background(), u.ID)
	ts.challenge = mustQuery(t, st.AuthorizationURL).Get("code_challenge")
	u, _, err := s.Complete(context.Background(), u.ID, st.State, "the-code")
	if err != nil {
		t.Fatal(err)
	}
	job := func(version int64) scheduler.Job {
		p, _ := json.Marshal(refreshPayload{UpstreamID: u.ID, CredentialVersion: version})
		return scheduler.Job{Payload: p, Attempt: 1, MaxAttempts: 5}
	}
	if out, err := s.refresh(context.Background(), job(u.CredentialVersion-1)); err != nil || out != scheduler.OutcomeNoop {
		t.Fatalf("old version: %q %v", out, err)
	}
	if out, err := s.refresh(context.Background(), job(u.CredentialVersion)); err != nil || out != scheduler.OutcomeDone {
		t.Fatalf("refresh: %q %v", out, err)
	}
	nu, _ := s.Store.GetUpstream(context.Background(), u.ID)
	tok, _ := s.Token(nu)
	if nu.CredentialVersion != u.CredentialVersion+1 || tok.AccessToken != "at-2" || tok.RefreshToken != "rt-2" || nu.SpecRevision != u.SpecRevision {
		t.Fatalf("after refresh v%d %+v rev %d", nu.CredentialVersion, tok, nu.SpecRevision)
	}
	if last := j.got[len(j.got)-1]; last.IdempotencyKey != RefreshKey(u.ID, nu.CredentialVersion) {
		t.Fatalf("next refresh %+v", last)
	}
	// The provider forgot the refresh token: permanent, visible in status.
	ts.mu.Lock()
	ts.refresh = "rotated-elsewhere"
	ts.mu.Unlock()
	_, err = s.refresh(context.Background(), job(nu.CredentialVersion))
	if !errors.Is(err, scheduler.ErrPermanent) || strings.Contains(err.Error(), "rt-2") {
		t.Fatalf("refused refresh: %v", err)
	}
	nu, _ = s.Store.GetUpstream(context.Background(), u.ID)
	if e := nu.Status.Error(); e == nil || !strings.Contains(*e, "OAuth flow again") || !strings.Contains(*e, "invalid_grant") || !nu.Status.RefreshRefused {
		t.Fatalf("status %+v", nu.Status)
	}
	// Revoke drops the credential; a second revoke is a no-op.
	rv, err := s.Revoke(context.Background(), u.ID)
	if err != nil || rv.CredentialKind != "" || rv.Credential != nil {
		t.Fatalf("revoke %+v %v", rv, err)
	}
	if _, err := s.Revoke(context.Background(), u.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Token(rv); !errors.Is(err, ErrNoCredential) {
		t.Fatalf("token after revoke: %v", err)
	}
}

func TestProviderErrorShapes(t *testing.T) {
	for body, code := range map[string]string{
		`{"error":"invalid_grant","error_description":"bad"}`:                   "invalid_grant",
		`{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`: "rate_limit_error",
		`not json`: "",
	} {
		var pe *ProviderError
		if err := providerError("op", 429, []byte(body)); !errors.As(err, &pe) || pe.Code != code || pe.Permanent() {
			t.Fatalf("%s: %v", body, err)
		}
	}
}
