package storetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseOAuth(t *testing.T, open Opener) {
	t.Run("OAuthFlows", func(t *testing.T) { run(t, open, testOAuthFlows) })
	t.Run("QuotaFence", func(t *testing.T) { run(t, open, testQuotaFence) })
	t.Run("QuotaFenceRace", func(t *testing.T) { run(t, open, testQuotaFenceRace) })
	t.Run("QuotaIdentity", func(t *testing.T) { run(t, open, testQuotaIdentity) })
	t.Run("WarmupState", func(t *testing.T) { run(t, open, testWarmupState) })
	t.Run("QuotaGarbage", func(t *testing.T) { run(t, open, testQuotaGarbage) })
}

func oauthUpstream(t *testing.T, b *bundle, name string) *store.Upstream {
	u := must(b.st.CreateUpstream(b.ctx, store.UpstreamSpec{Name: name, Kind: store.KindVendorOAuth, BaseURL: "https://api.example.test",
		WarmupEnabled: true, OAuthAuthorizeURL: "https://auth.example.test/authorize", OAuthTokenURL: "https://auth.example.test/token"}))
	return must(b.st.SetUpstreamCredential(b.ctx, u.ID, "oauth", []byte("sealed-token-bundle")))
}

func testOAuthFlows(t *testing.T, open Opener) {
	b := setup(t, open)
	u := oauthUpstream(t, b, "sub")
	if u.OAuthAuthorizeURL != "https://auth.example.test/authorize" || u.OAuthTokenURL != "https://auth.example.test/token" {
		t.Fatalf("oauth endpoints not stored: %+v", u)
	}
	now := b.clk.Now()
	f := store.OAuthFlow{State: "st-1", UpstreamID: u.ID, Verifier: []byte("sealed"), RedirectURI: "https://cb.test/",
		CreatedAt: now, ExpiresAt: now.Add(10 * time.Minute)}
	must(0, b.st.CreateOAuthFlow(b.ctx, f))
	wantErr(t, b.st.CreateOAuthFlow(b.ctx, f), store.ErrConflict)
	got := must(b.st.TakeOAuthFlow(b.ctx, "st-1", now))
	if got.UpstreamID != u.ID || string(got.Verifier) != "sealed" || got.RedirectURI != f.RedirectURI {
		t.Fatalf("flow = %+v", got)
	}
	_, err := b.st.TakeOAuthFlow(b.ctx, "st-1", now)
	wantErr(t, err, store.ErrNotFound) // single use
	f.State = "st-2"
	must(0, b.st.CreateOAuthFlow(b.ctx, f))
	_, err = b.st.TakeOAuthFlow(b.ctx, "st-2", now.Add(11*time.Minute))
	wantErr(t, err, store.ErrNotFound) // expired

	// Concurrent completions of one state: exactly one takes it.
	f.State = "st-3"
	must(0, b.st.CreateOAuthFlow(b.ctx, f))
	var wins atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.st.TakeOAuthFlow(b.ctx, "st-3", now); err == nil {
				wins.Add(1)
			} else if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("take: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d completions took one state", wins.Load())
	}
	// None of this is configuration.
	gen := must(b.st.ConfigGeneration(b.ctx))
	f.State = "st-4"
	must(0, b.st.CreateOAuthFlow(b.ctx, f))
	if must(b.st.ConfigGeneration(b.ctx)) != gen {
		t.Fatal("a flow write bumped the config generation")
	}
}

func observation(id string, version int64, polled time.Time, couponID string) store.QuotaObservation {
	reset := polled.Add(3 * time.Hour)
	return store.QuotaObservation{UpstreamID: id, CredentialVersion: version, PolledAt: polled, ObservedAt: polled.Add(time.Second),
		FiveHour: store.QuotaWindow{Utilization: 40, ResetsAt: &reset}, SevenDay: store.QuotaWindow{Utilization: 10},
		CouponReported: true, CouponAvailable: couponID != "", CouponID: couponID, AccountUUID: "acct-1", IdentityVersion: version}
}

// P-COUPON-2, P-COUPON-4: the fence is atomic, an older poll never restores
// a consumed coupon, and an unresolved fence is recovered only by a poll
// started after the recovery delay.
func testQuotaFence(t *testing.T, open Opener) {
	b := setup(t, open)
	u := oauthUpstream(t, b, "sub")
	_, err := b.st.GetQuota(b.ctx, u.ID)
	wantErr(t, err, store.ErrNotFound)
	t0 := b.clk.Now()
	if !must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, t0, "cpn-1"), 5*time.Minute)) {
		t.Fatal("first observation not applied")
	}
	q := must(b.st.GetQuota(b.ctx, u.ID))
	if !q.CouponAvailable || q.CouponID != "cpn-1" || q.FiveHour.Utilization != 40 || q.FiveHour.ResetsAt == nil || q.Fence != nil {
		t.Fatalf("stored %+v", q)
	}
	// Wrong coupon or credential version: no fence.
	_, err = b.st.AcquireCouponFence(b.ctx, u.ID, "cpn-other", u.CredentialVersion, t0)
	wantErr(t, err, store.ErrConflict)
	_, err = b.st.AcquireCouponFence(b.ctx, u.ID, "cpn-1", u.CredentialVersion+1, t0)
	wantErr(t, err, store.ErrConflict)

	claimAt := t0.Add(10 * time.Second)
	fence := must(b.st.AcquireCouponFence(b.ctx, u.ID, "cpn-1", u.CredentialVersion, claimAt))
	_, err = b.st.AcquireCouponFence(b.ctx, u.ID, "cpn-1", u.CredentialVersion, claimAt)
	wantErr(t, err, store.ErrConflict) // overlapping claim

	// A poll during the unresolved claim keeps the coupon as fenced.
	must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, claimAt.Add(time.Second), "cpn-1"), 5*time.Minute))
	q = must(b.st.GetQuota(b.ctx, u.ID))
	if q.Fence == nil || q.Fence.State != store.FenceClaiming || q.Fence.ID != fence {
		t.Fatalf("fence lost by a poll: %+v", q.Fence)
	}
	resolved := claimAt.Add(2 * time.Second)
	must(0, b.st.ResolveCouponFence(b.ctx, u.ID, fence, store.FenceConsumed, resolved))
	wantErr(t, b.st.ResolveCouponFence(b.ctx, u.ID, fence, store.FenceConsumed, resolved), store.ErrNotFound)
	q = must(b.st.GetQuota(b.ctx, u.ID))
	if q.CouponAvailable || q.CouponID != "" || q.Fence.State != store.FenceConsumed {
		t.Fatalf("after consumption %+v fence %+v", q, q.Fence)
	}
	// A response to a poll sent before the claim resolved is stale.
	if must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, claimAt.Add(-time.Second), "cpn-1"), 5*time.Minute)) {
		t.Fatal("stale poll applied")
	}
	if q = must(b.st.GetQuota(b.ctx, u.ID)); q.CouponAvailable {
		t.Fatal("stale poll restored the consumed coupon")
	}
	// A poll sent after the reset replaces the observation and the fence.
	fresh := observation(u.ID, u.CredentialVersion, resolved.Add(2*time.Second), "")
	fresh.FiveHour = store.QuotaWindow{}
	if !must(b.st.PutQuota(b.ctx, fresh, 5*time.Minute)) {
		t.Fatal("fresh poll not applied")
	}
	if q = must(b.st.GetQuota(b.ctx, u.ID)); q.Fence != nil || q.CouponAvailable || q.FiveHour.ResetsAt != nil {
		t.Fatalf("after fresh poll %+v", q)
	}

	// Unresolved fence: recovered only by a poll that starts 5 minutes on.
	t1 := resolved.Add(time.Minute)
	must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, t1, "cpn-2"), 5*time.Minute))
	fence2 := must(b.st.AcquireCouponFence(b.ctx, u.ID, "cpn-2", u.CredentialVersion, t1))
	must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, t1.Add(4*time.Minute), "cpn-2"), 5*time.Minute))
	if q = must(b.st.GetQuota(b.ctx, u.ID)); q.Fence == nil || q.Fence.ID != fence2 {
		t.Fatal("fence recovered before the delay")
	}
	must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, t1.Add(5*time.Minute), ""), 5*time.Minute))
	if q = must(b.st.GetQuota(b.ctx, u.ID)); q.Fence != nil || q.CouponAvailable {
		t.Fatalf("fence not recovered from fresh state: %+v", q)
	}
	// The late resolution of a recovered fence finds nothing to resolve.
	wantErr(t, b.st.ResolveCouponFence(b.ctx, u.ID, fence2, store.FenceConsumed, t1.Add(6*time.Minute)), store.ErrNotFound)

	// Released: the POST was never sent; the coupon is claimable again.
	t2 := t1.Add(10 * time.Minute)
	must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, t2, "cpn-3"), 5*time.Minute))
	fence3 := must(b.st.AcquireCouponFence(b.ctx, u.ID, "cpn-3", u.CredentialVersion, t2))
	must(0, b.st.ResolveCouponFence(b.ctx, u.ID, fence3, store.FenceReleased, t2))
	must(b.st.AcquireCouponFence(b.ctx, u.ID, "cpn-3", u.CredentialVersion, t2))
}

// Concurrent claims: exactly one fence.
func testQuotaFenceRace(t *testing.T, open Opener) {
	b := setup(t, open)
	u := oauthUpstream(t, b, "sub")
	must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, b.clk.Now(), "cpn-1"), 5*time.Minute))
	var wins atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.st.AcquireCouponFence(b.ctx, u.ID, "cpn-1", u.CredentialVersion, b.clk.Now())
			if err == nil {
				wins.Add(1)
			} else if !errors.Is(err, store.ErrConflict) {
				t.Errorf("acquire: %v", err)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d claims got the fence", wins.Load())
	}
}

// P-USAGE-3: identity kept per credential version.
func testQuotaIdentity(t *testing.T, open Opener) {
	b := setup(t, open)
	u := oauthUpstream(t, b, "sub")
	now := b.clk.Now()
	must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, now, "cpn"), 5*time.Minute))
	o := observation(u.ID, u.CredentialVersion, now.Add(time.Minute), "cpn")
	o.AccountUUID, o.IdentityVersion = "", 0
	must(b.st.PutQuota(b.ctx, o, 5*time.Minute))
	if q := must(b.st.GetQuota(b.ctx, u.ID)); q.AccountUUID != "acct-1" || q.IdentityVersion != u.CredentialVersion {
		t.Fatalf("identity not kept: %+v", q)
	}
	o = observation(u.ID, u.CredentialVersion+1, now.Add(2*time.Minute), "cpn")
	o.AccountUUID, o.IdentityVersion = "", 0
	must(b.st.PutQuota(b.ctx, o, 5*time.Minute))
	if q := must(b.st.GetQuota(b.ctx, u.ID)); q.AccountUUID != "" {
		t.Fatalf("identity of an old credential kept: %+v", q)
	}
}

func testWarmupState(t *testing.T, open Opener) {
	b := setup(t, open)
	u := oauthUpstream(t, b, "sub")
	w := must(b.st.GetWarmupState(b.ctx, u.ID))
	if w.CycleKey != "" || w.LeaseUntil != nil {
		t.Fatalf("zero state %+v", w)
	}
	now := b.clk.Now()
	if !must(b.st.AcquireWarmupLease(b.ctx, u.ID, "w1", now.Add(time.Minute), now)) {
		t.Fatal("lease not acquired")
	}
	if must(b.st.AcquireWarmupLease(b.ctx, u.ID, "w2", now.Add(time.Minute), now)) {
		t.Fatal("second owner got a held lease")
	}
	if !must(b.st.AcquireWarmupLease(b.ctx, u.ID, "w2", now.Add(2*time.Minute), now.Add(time.Minute))) {
		t.Fatal("expired lease not taken over")
	}
	must(0, b.st.ReleaseWarmupLease(b.ctx, u.ID, "w1")) // not the holder: no effect
	if must(b.st.AcquireWarmupLease(b.ctx, u.ID, "w3", now.Add(3*time.Minute), now.Add(time.Minute))) {
		t.Fatal("release by a non-holder dropped the lease")
	}
	must(0, b.st.ReleaseWarmupLease(b.ctx, u.ID, "w2"))
	if !must(b.st.AcquireWarmupLease(b.ctx, u.ID, "w3", now.Add(3*time.Minute), now.Add(time.Minute))) {
		t.Fatal("released lease not free")
	}

	rev := must(b.st.GetUpstream(b.ctx, u.ID)).SpecRevision
	gen := must(b.st.ConfigGeneration(b.ctx))
	at := now.Add(5 * time.Minute)
	if !must(b.st.WriteCycleKey(b.ctx, u.ID, "5h:1000", at)) {
		t.Fatal("cycle key not written")
	}
	if must(b.st.WriteCycleKey(b.ctx, u.ID, "5h:1000", at.Add(time.Minute))) {
		t.Fatal("the same cycle key written twice")
	}
	got := must(b.st.GetUpstream(b.ctx, u.ID))
	if got.Status.LastWarmupAt == nil || !got.Status.LastWarmupAt.Equal(at) || got.SpecRevision != rev {
		t.Fatalf("warm-up stamp %v, revision %d→%d", got.Status.LastWarmupAt, rev, got.SpecRevision)
	}
	if must(b.st.ConfigGeneration(b.ctx)) != gen {
		t.Fatal("a warm-up write bumped the config generation")
	}
	must(0, b.st.RecordResetCycleKey(b.ctx, u.ID, "7d:2000", at))
	w = must(b.st.GetWarmupState(b.ctx, u.ID))
	if w.CycleKey != "5h:1000" || w.ResetCycleKey != "7d:2000" || w.CycleWrittenAt == nil || w.ResetRecordedAt == nil {
		t.Fatalf("state %+v", w)
	}
	if got := must(b.st.GetUpstream(b.ctx, u.ID)); !got.Status.LastWarmupAt.Equal(at) {
		t.Fatal("a reset record stamped the upstream as warmed")
	}
}

func testQuotaGarbage(t *testing.T, open Opener) {
	b := setup(t, open)
	keep := oauthUpstream(t, b, "keep")
	gone := oauthUpstream(t, b, "gone")
	revoked := oauthUpstream(t, b, "revoked")
	now := b.clk.Now()
	for _, u := range []*store.Upstream{keep, gone, revoked} {
		must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, now, ""), 5*time.Minute))
		must(b.st.WriteCycleKey(b.ctx, u.ID, "k", now))
	}
	must(0, b.st.CreateOAuthFlow(b.ctx, store.OAuthFlow{State: "old", UpstreamID: keep.ID, Verifier: []byte("v"), CreatedAt: now, ExpiresAt: now.Add(time.Minute)}))
	must(0, b.st.CreateOAuthFlow(b.ctx, store.OAuthFlow{State: "new", UpstreamID: keep.ID, Verifier: []byte("v"), CreatedAt: now, ExpiresAt: now.Add(time.Hour)}))
	must(0, b.st.DeleteUpstream(b.ctx, gone.ID, store.AnyRevision))
	must(b.st.SetUpstreamCredential(b.ctx, revoked.ID, "", nil))
	gc := must(b.st.CollectQuotaGarbage(b.ctx, now.Add(10*time.Minute)))
	if gc.Observations != 2 || gc.WarmupStates != 2 || gc.Flows != 1 {
		t.Fatalf("gc = %+v", gc)
	}
	must(b.st.GetQuota(b.ctx, keep.ID))
	if _, err := b.st.GetQuota(b.ctx, gone.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatal("observation of a deleted upstream kept")
	}
	must(b.st.TakeOAuthFlow(b.ctx, "new", now))
	if again := must(b.st.CollectQuotaGarbage(b.ctx, now.Add(10*time.Minute))); again != (store.QuotaGC{}) {
		t.Fatalf("second gc removed %+v", again)
	}
}
