package admin_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/oauth"
	"github.com/pillarhq/pillar/impl/gateway/quota"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// fakeOAuth stands in for the OAuth services: the admin API's own
// behaviour (routing, validation, error mapping, response shapes) is tested
// here; the services are tested against the provider simulator in
// conformance/proxy.
type fakeOAuth struct {
	st store.Store
	mu sync.Mutex
	// claimErr fails Claim for an upstream id.
	claimErr map[string]error
	warmups  []string
}

func (f *fakeOAuth) Start(ctx context.Context, id string) (*oauth.Started, error) {
	u, err := f.st.GetUpstream(ctx, id)
	if err != nil {
		return nil, err
	}
	if u.Kind != store.KindVendorOAuth {
		return nil, oauth.ErrNotOAuth
	}
	return &oauth.Started{AuthorizationURL: "https://auth.example/authorize?state=st-" + id, State: "st-" + id, ExpiresAt: now.Add(10 * time.Minute)}, nil
}

func (f *fakeOAuth) Complete(ctx context.Context, id, state, code string) (*store.Upstream, string, error) {
	if _, err := f.st.GetUpstream(ctx, id); err != nil {
		return nil, "", err
	}
	switch {
	case state != "st-"+id:
		return nil, "", oauth.ErrUnknownState
	case code == "no-inference":
		return nil, "", oauth.ErrScopeInsufficient
	case code == "refused":
		return nil, "", &oauth.ProviderError{Op: "token exchange", Status: 400, Code: "invalid_grant"}
	}
	u, err := f.st.SetUpstreamCredential(ctx, id, "oauth", []byte("sealed"))
	return u, "oauth", err
}

func (f *fakeOAuth) Revoke(ctx context.Context, id string) (*store.Upstream, error) {
	u, err := f.st.GetUpstream(ctx, id)
	if err != nil {
		return nil, err
	}
	if u.Kind != store.KindVendorOAuth {
		return nil, oauth.ErrNotOAuth
	}
	return f.st.SetUpstreamCredential(ctx, id, "", nil)
}

func (f *fakeOAuth) Observe(ctx context.Context, u *store.Upstream) (*quota.View, error) {
	q, err := f.st.GetQuota(ctx, u.ID)
	if err != nil {
		return &quota.View{}, nil
	}
	return &quota.View{Observation: q, Usable: q.CouponAvailable && q.Fence == nil}, nil
}

func (f *fakeOAuth) Claim(ctx context.Context, id string) (*quota.View, error) {
	u, err := f.st.GetUpstream(ctx, id)
	if err != nil {
		return nil, err
	}
	v, _ := f.Observe(ctx, u)
	f.mu.Lock()
	cerr := f.claimErr[id]
	f.mu.Unlock()
	if cerr != nil {
		return v, cerr
	}
	if !v.Usable {
		return v, quota.ErrNoCoupon
	}
	return v, nil
}

func (f *fakeOAuth) WarmupEnabled(_ context.Context, u *store.Upstream) {
	f.mu.Lock()
	f.warmups = append(f.warmups, u.ID)
	f.mu.Unlock()
}

func (f *fakeOAuth) failClaim(id string, err error) {
	f.mu.Lock()
	f.claimErr[id] = err
	f.mu.Unlock()
}

// P-API-7: start returns the authorization URL and state; complete returns
// the upstream with the credential mode negotiated; warm-up may be enabled
// only then, and enabling it asks for an immediate attempt.
func TestOAuthFlowEndpoints(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.oauthUpstream("sub")["id"].(string)
	st := e.do("POST", "/admin/v1/upstreams/"+id+"/oauth/start", nil)
	if st.status != 200 {
		t.Fatalf("start: %d %s", st.status, st.body)
	}
	started := st.json(t)
	if _, err := url.Parse(started["authorization_url"].(string)); err != nil || started["state"] != "st-"+id {
		t.Fatalf("start body %v", started)
	}
	up := e.do("GET", "/admin/v1/upstreams/"+id, nil).json(t)
	if up["credential_mode"] != nil || up["warmup_enabled"] != true {
		t.Fatalf("before completion: %v", up)
	}
	done := e.do("POST", "/admin/v1/upstreams/"+id+"/oauth/complete", map[string]any{"state": "st-" + id, "code": "c0de"})
	if done.status != 200 || done.json(t)["credential_mode"] != "oauth" || done.header.Get("ETag") == "" {
		t.Fatalf("complete: %d %s", done.status, done.body)
	}
	// Warm-up off, then on again: the PATCH is accepted now and enqueues.
	off := e.do("PATCH", "/admin/v1/upstreams/"+id, map[string]any{"warmup_enabled": false}, "If-Match", done.header.Get("ETag"))
	if off.status != 200 {
		t.Fatalf("warm-up off: %d %s", off.status, off.body)
	}
	on := e.do("PATCH", "/admin/v1/upstreams/"+id, map[string]any{"warmup_enabled": true}, "If-Match", off.header.Get("ETag"))
	if on.status != 200 || on.json(t)["warmup_enabled"] != true {
		t.Fatalf("warm-up on: %d %s", on.status, on.body)
	}
	e.oauth.mu.Lock()
	warmups := strings.Join(e.oauth.warmups, ",")
	e.oauth.mu.Unlock()
	if warmups != id {
		t.Fatalf("immediate warm-ups requested for %q, want %q", warmups, id)
	}
	rv := e.do("POST", "/admin/v1/upstreams/"+id+"/oauth/revoke", nil)
	if rv.status != 200 || rv.json(t)["credential_mode"] != nil || rv.json(t)["has_credential"] != false {
		t.Fatalf("revoke: %d %s", rv.status, rv.body)
	}
}

// The OAuth endpoints override only vendor_oauth upstreams' endpoints.
func TestOAuthEndpointOverrides(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "o", "kind": "vendor_oauth", "base_url": "https://api.example",
		"oauth_authorize_url": "https://auth.example/authorize", "oauth_token_url": "https://auth.example/token"})
	if r.status != 201 || r.json(t)["oauth_authorize_url"] != "https://auth.example/authorize" || r.json(t)["oauth_token_url"] != "https://auth.example/token" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "o2", "kind": "vendor_oauth", "base_url": "https://api.example",
		"oauth_token_url": "ftp://x"}), 400, "invalid_location")
	wantErr(t, e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "k", "kind": "vendor_api_key", "base_url": "https://api.example",
		"api_key_value": "k", "oauth_token_url": "https://auth.example/token"}), 400, "invalid_request")
	// PUT keeps them unless given.
	id := r.json(t)["id"].(string)
	put := e.do("PUT", "/admin/v1/upstreams/"+id, map[string]any{"name": "o", "base_url": "https://api2.example"})
	if put.status != 200 || put.json(t)["oauth_token_url"] != "https://auth.example/token" {
		t.Fatalf("put: %d %s", put.status, put.body)
	}
}

// The stored observation is served with no provider contact, and no coupon
// is advertised before the first observation.
func TestLimitResetObservation(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.oauthUpstream("sub")["id"].(string)
	r := e.do("GET", "/admin/v1/upstreams/"+id+"/limit-resets", nil).json(t)
	if r["observed"] != false || r["coupon"].(map[string]any)["available"] != false || r["five_hour"] != nil {
		t.Fatalf("before an observation: %v", r)
	}
	if _, err := e.st.SetUpstreamCredential(context.Background(), id, "oauth", []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	reset := now.Add(time.Hour)
	if _, err := e.st.PutQuota(context.Background(), store.QuotaObservation{UpstreamID: id, CredentialVersion: 1, PolledAt: now, ObservedAt: now,
		FiveHour: store.QuotaWindow{Utilization: 12.5, ResetsAt: &reset}, CouponReported: true, CouponAvailable: true, CouponID: "cpn-1",
		AccountUUID: "acct", IdentityVersion: 1}, time.Minute); err != nil {
		t.Fatal(err)
	}
	r = e.do("GET", "/admin/v1/upstreams/"+id+"/limit-resets", nil).json(t)
	fh := r["five_hour"].(map[string]any)
	if r["observed"] != true || fh["utilization"] != 12.5 || fh["active"] != true || r["coupon"].(map[string]any)["coupon_id"] != "cpn-1" {
		t.Fatalf("observation: %v", r)
	}
	c := e.do("POST", "/admin/v1/upstreams/"+id+"/limit-resets/claim", nil)
	if c.status != 200 || c.json(t)["outcome"] != "reset" {
		t.Fatalf("claim: %d %s", c.status, c.body)
	}
}
