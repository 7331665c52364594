package quota

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/oauth"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// provider is a minimal account endpoint: usage with a coupon, profile,
// and a claim that can answer, refuse, fail or lose its answer.
type provider struct {
	mu         sync.Mutex
	account    string
	coupon     string // empty: none
	claimMode  string // "", "refuse", "5xx", "lost"
	usageCalls []string
	profiles   atomic.Int64
	claims     atomic.Int64
	// claimGate, when set, holds claims until closed.
	claimGate chan struct{}
	// usageGate, when set, holds usage requests until closed; each one
	// held is announced on usageHeld first.
	usageGate chan struct{}
	usageHeld chan struct{}
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch r.URL.Path {
	case "/api/oauth/usage":
		p.usageCalls = append(p.usageCalls, r.URL.RawQuery)
		if g := p.usageGate; g != nil {
			p.usageHeld <- struct{}{}
			p.mu.Unlock()
			<-g
			p.mu.Lock()
		}
		body := map[string]any{"five_hour": map[string]any{"utilization": 40, "resets_at": t0.Add(time.Hour)},
			"seven_day": map[string]any{"utilization": 10, "resets_at": nil}, "extra_usage": map[string]any{"is_enabled": false}}
		if r.URL.Query().Get("cedar_ember") == "1" {
			c := map[string]any{"available": p.coupon != "", "coupon_id": nil, "expires_at": nil}
			if p.coupon != "" {
				c["coupon_id"] = p.coupon
			}
			body["limit_reset_coupon"] = c
		}
		json.NewEncoder(w).Encode(body)
	case "/api/oauth/profile":
		p.profiles.Add(1)
		fmt.Fprintf(w, `{"account":{"uuid":%q},"organization":{"uuid":"org"}}`, p.account)
	case "/api/oauth/usage/limit_reset":
		p.claims.Add(1)
		if g := p.claimGate; g != nil {
			p.mu.Unlock()
			<-g
			p.mu.Lock()
		}
		switch p.claimMode {
		case "refuse":
			w.WriteHeader(409)
			io := `{"type":"error","error":{"type":"coupon_unavailable","message":"no"}}`
			w.Write([]byte(io))
		case "5xx":
			w.WriteHeader(500)
		case "lost":
			p.coupon = ""
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		default:
			p.coupon = ""
			w.Write([]byte(`{"reset":true}`))
		}
	default:
		w.WriteHeader(404)
	}
}

type jobs struct {
	mu   sync.Mutex
	keys []string
}

func (j *jobs) Enqueue(_ context.Context, e scheduler.Enqueue) (bool, int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.keys = append(j.keys, e.IdempotencyKey)
	return true, 1, nil
}

type tokens struct{}

func (tokens) Token(u *store.Upstream) (*oauth.Token, error) {
	if u.CredentialKind != "oauth" {
		return nil, oauth.ErrNoCredential
	}
	return &oauth.Token{AccessToken: "tok"}, nil
}

type env struct {
	st   store.Store
	prov *provider
	srv  *httptest.Server
	svc  *Service
	jobs *jobs
	clk  *fakeclock.Clock
	up   *store.Upstream
}

func (e *env) advance(d time.Duration) { e.clk.Advance(d) }

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{prov: &provider{account: "acct-1", coupon: "cpn-1"}, jobs: &jobs{}, clk: fakeclock.New(t0)}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "q.db"), sqlite.Options{Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewServer(e.prov)
	t.Cleanup(srv.Close)
	e.st, e.srv = st, srv
	e.svc = service.Init(service.Options{Clock: e.clk}, &Service{Store: st, Tokens: tokens{}, Client: &oauth.Client{HTTP: srv.Client()}, Jobs: e.jobs})
	u, err := st.CreateUpstream(context.Background(), store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: srv.URL, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if u, err = st.SetUpstreamCredential(context.Background(), u.ID, "oauth", []byte("sealed")); err != nil {
		t.Fatal(err)
	}
	e.up = u
	return e
}

func (e *env) view(t *testing.T) *View {
	t.Helper()
	u, _ := e.st.GetUpstream(context.Background(), e.up.ID)
	v, err := e.svc.Observe(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// P-USAGE-3: two polls of one upstream at once (a credential's first poll
// and the periodic tick, both due) run one after the other, so the second
// reuses the identity the first resolved instead of asking again.
func TestConcurrentPollsResolveIdentityOnce(t *testing.T) {
	e := setup(t)
	e.prov.usageGate, e.prov.usageHeld = make(chan struct{}), make(chan struct{}, 2)
	errs := make(chan error, 2)
	poll := func() {
		_, err := e.svc.Poll(context.Background(), e.up.ID)
		errs <- err
	}
	go poll()
	<-e.prov.usageHeld // the first poll waits for its usage answer
	go poll()
	select {
	case <-e.prov.usageHeld:
		t.Error("a second poll of the upstream asked for usage while the first was running")
	case <-time.After(300 * time.Millisecond):
	}
	close(e.prov.usageGate)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := e.prov.profiles.Load(); n != 1 {
		t.Fatalf("identity resolved %d times for one credential version", n)
	}
}

// P-USAGE-1, P-USAGE-2, P-USAGE-3, P-USAGE-4: one request per poll with
// cedar_ember=1 and no skip_spend; windows, extra usage and coupon from one
// answer; identity resolved once per credential version; no coupon
// advertised before an observation, after a credential replacement, or
// when stale.
func TestPoll(t *testing.T) {
	e := setup(t)
	if v := e.view(t); v.Observation != nil || v.Usable {
		t.Fatal("a coupon advertised before the first observation")
	}
	for range 3 {
		if ok, err := e.svc.Poll(context.Background(), e.up.ID); err != nil || !ok {
			t.Fatal(ok, err)
		}
		e.advance(time.Minute)
	}
	if len(e.prov.usageCalls) != 3 || e.prov.usageCalls[0] != "cedar_ember=1" {
		t.Fatalf("usage requests %v", e.prov.usageCalls)
	}
	if e.prov.profiles.Load() != 1 {
		t.Fatalf("identity resolved %d times for one credential version", e.prov.profiles.Load())
	}
	v := e.view(t)
	q := v.Observation
	if !v.Usable || q.CouponID != "cpn-1" || q.FiveHour.Utilization != 40 || q.FiveHour.ResetsAt == nil || q.SevenDay.Utilization != 10 ||
		q.AccountUUID != "acct-1" || string(q.ExtraUsage) != `{"is_enabled":false}` {
		t.Fatalf("observation %+v", q)
	}
	// Stale: not advertised.
	e.advance(time.Hour)
	if e.view(t).Usable {
		t.Fatal("a stale observation advertises a coupon")
	}
	if _, err := e.svc.Claim(context.Background(), e.up.ID); !errors.Is(err, ErrNoCoupon) {
		t.Fatalf("claim on a stale observation: %v", err)
	}
	// Credential replaced: not advertised until a poll with it; identity again.
	e.svc.Poll(context.Background(), e.up.ID)
	if !e.view(t).Usable {
		t.Fatal("fresh poll not usable")
	}
	if _, err := e.st.SetUpstreamCredential(context.Background(), e.up.ID, "oauth", []byte("sealed2")); err != nil {
		t.Fatal(err)
	}
	if e.view(t).Usable {
		t.Fatal("a coupon advertised after the credential was replaced")
	}
	e.svc.Poll(context.Background(), e.up.ID)
	if !e.view(t).Usable || e.prov.profiles.Load() != 2 {
		t.Fatalf("after the new credential's poll: usable %v, profiles %d", e.view(t).Usable, e.prov.profiles.Load())
	}
}

// P-COUPON-1, P-COUPON-3: a claim checks the live identity, sends one POST
// and queues a poll; the coupon is consumed.
func TestClaim(t *testing.T) {
	e := setup(t)
	e.svc.Poll(context.Background(), e.up.ID)
	v, err := e.svc.Claim(context.Background(), e.up.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.prov.claims.Load() != 1 || v.Usable || v.Observation.Fence == nil || v.Observation.Fence.State != store.FenceConsumed {
		t.Fatalf("claims %d view %+v", e.prov.claims.Load(), v)
	}
	if e.prov.profiles.Load() != 2 {
		t.Fatal("the claim did not check the live identity")
	}
	if len(e.jobs.keys) != 1 || e.jobs.keys[0] != PollOneJob+":"+e.up.ID+":claim:"+v.Observation.Fence.ID {
		t.Fatalf("poll after the reset: %v", e.jobs.keys)
	}
	if _, err := e.svc.Claim(context.Background(), e.up.ID); !errors.Is(err, ErrNoCoupon) {
		t.Fatalf("second claim: %v", err)
	}
	if e.prov.claims.Load() != 1 {
		t.Fatal("a second POST was sent")
	}
}

// A credential that now belongs to another account claims nothing.
func TestClaimIdentityMismatch(t *testing.T) {
	e := setup(t)
	e.svc.Poll(context.Background(), e.up.ID)
	e.prov.mu.Lock()
	e.prov.account = "acct-2"
	e.prov.mu.Unlock()
	if _, err := e.svc.Claim(context.Background(), e.up.ID); !errors.Is(err, ErrAccountMismatch) {
		t.Fatalf("claim: %v", err)
	}
	if e.prov.claims.Load() != 0 {
		t.Fatal("POST sent for another account")
	}
}

// P-COUPON-2: concurrent claims send one POST; a poll sent before the claim
// resolved never restores the coupon.
func TestConcurrentClaimsAndStalePoll(t *testing.T) {
	e := setup(t)
	e.svc.Poll(context.Background(), e.up.ID)
	gate := make(chan struct{})
	e.prov.mu.Lock()
	e.prov.claimGate = gate
	e.prov.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = e.svc.Claim(context.Background(), e.up.ID) }()
	}
	// While the claim is in flight, a poll starts (and sees the old coupon).
	waitfor.True(t, "the claim to reach the provider", func() bool { return e.prov.claims.Load() > 0 })
	pollStarted := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		close(pollStarted)
		_, _ = e.svc.Poll(context.Background(), e.up.ID)
	}()
	<-pollStarted
	time.Sleep(20 * time.Millisecond)
	e.advance(time.Second)
	close(gate)
	wg.Wait()
	ok, busy := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, ErrClaimInProgress), errors.Is(err, ErrNoCoupon):
			busy++
		default:
			t.Fatalf("claim: %v", err)
		}
	}
	if ok != 1 || e.prov.claims.Load() != 1 {
		t.Fatalf("%d claims succeeded, %d POSTs", ok, e.prov.claims.Load())
	}
	// Whatever the racing poll saw, the coupon stays consumed.
	if v := e.view(t); v.Usable || v.Observation.CouponAvailable {
		t.Fatalf("the consumed coupon was restored: %+v", v.Observation)
	}
	// A poll started later shows the provider's fresh state.
	e.advance(time.Second)
	if ok, _ := e.svc.Poll(context.Background(), e.up.ID); !ok {
		t.Fatal("fresh poll discarded")
	}
	if v := e.view(t); v.Observation.Fence != nil || v.Usable {
		t.Fatalf("after the fresh poll %+v", v.Observation)
	}
}

// P-COUPON-4, P-LIM-2: a lost answer leaves the fence unresolved; only a
// poll five minutes later recovers it, and the POST is never repeated.
func TestLostClaimAnswer(t *testing.T) {
	for _, mode := range []string{"lost", "5xx"} {
		t.Run(mode, func(t *testing.T) {
			e := setup(t)
			e.svc.Poll(context.Background(), e.up.ID)
			e.prov.mu.Lock()
			e.prov.claimMode = mode
			e.prov.mu.Unlock()
			_, err := e.svc.Claim(context.Background(), e.up.ID)
			if !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("claim: %v", err)
			}
			e.advance(4 * time.Minute)
			e.svc.Poll(context.Background(), e.up.ID)
			if v := e.view(t); v.Observation.Fence == nil || v.Usable {
				t.Fatal("fence recovered before five minutes")
			}
			if _, err := e.svc.Claim(context.Background(), e.up.ID); !errors.Is(err, ErrNoCoupon) {
				t.Fatalf("claim during the fence: %v", err)
			}
			e.advance(time.Minute)
			e.svc.Poll(context.Background(), e.up.ID)
			v := e.view(t)
			if v.Observation.Fence != nil {
				t.Fatal("fence not recovered by the poll after five minutes")
			}
			// lost: the provider applied it, the coupon is gone; 5xx: it was
			// not applied, the coupon is claimable again (a new claim).
			if (mode == "lost") == v.Usable {
				t.Fatalf("%s: usable %v after recovery", mode, v.Usable)
			}
			if e.prov.claims.Load() != 1 {
				t.Fatalf("recovery repeated the POST: %d", e.prov.claims.Load())
			}
		})
	}
}

// A refused claim marks the coupon unusable until a later poll.
func TestRefusedClaim(t *testing.T) {
	e := setup(t)
	e.svc.Poll(context.Background(), e.up.ID)
	e.prov.mu.Lock()
	e.prov.claimMode = "refuse"
	e.prov.mu.Unlock()
	if _, err := e.svc.Claim(context.Background(), e.up.ID); !errors.Is(err, ErrClaimRejected) {
		t.Fatalf("claim: %v", err)
	}
	if v := e.view(t); v.Usable || v.Observation.Fence.State != store.FenceRejected {
		t.Fatalf("after refusal %+v", v.Observation)
	}
}

// The provider unreachable: the claim fails before any fence.
func TestClaimProviderDown(t *testing.T) {
	e := setup(t)
	e.svc.Poll(context.Background(), e.up.ID)
	// The provider goes away (the upstream keeps its origin: moving it
	// would need its credential again).
	e.srv.Close()
	if _, err := e.svc.Claim(context.Background(), e.up.ID); !errors.Is(err, ErrProviderUnusable) {
		t.Fatalf("claim: %v", err)
	}
	if v := e.view(t); v.Observation.Fence != nil {
		t.Fatal("a fence was taken without a POST")
	}
}

// Quota GC removes the observations of upstreams that lost their credential.
func TestGC(t *testing.T) {
	e := setup(t)
	e.svc.Poll(context.Background(), e.up.ID)
	if out, _ := e.svc.gc(context.Background(), scheduler.Job{}); out != scheduler.OutcomeNoop {
		t.Fatalf("gc of live state: %s", out)
	}
	e.st.SetUpstreamCredential(context.Background(), e.up.ID, "", nil)
	var removed store.QuotaGC
	e.svc.OnGC = func(g store.QuotaGC) { removed = g }
	if out, _ := e.svc.gc(context.Background(), scheduler.Job{}); out != scheduler.OutcomeDone || removed.Observations != 1 {
		t.Fatalf("gc: %s %+v", out, removed)
	}
}
