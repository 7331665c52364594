package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseUpstreams(t *testing.T, open Opener) {
	t.Run("Upstreams", func(t *testing.T) { run(t, open, testUpstreams) })
	t.Run("UpstreamConcurrency", func(t *testing.T) { run(t, open, testUpstreamConcurrency) })
	t.Run("BackgroundWrites", func(t *testing.T) { run(t, open, testBackgroundWrites) })
	t.Run("StatusWriters", func(t *testing.T) { run(t, open, testStatusWriters) })
	t.Run("StatusWritersConcurrent", func(t *testing.T) { run(t, open, testStatusWritersConcurrent) })
	t.Run("MassDisableWarmup", func(t *testing.T) { run(t, open, testMassDisable) })
	t.Run("ReferencedDelete", func(t *testing.T) { run(t, open, testReferenced) })
	t.Run("ReferenceMatching", func(t *testing.T) { run(t, open, testReferenceMatching) })
	t.Run("Weight", func(t *testing.T) { run(t, open, testUpstreamWeight) })
	t.Run("Cooldowns", func(t *testing.T) { run(t, open, testCooldowns) })
	t.Run("UtilizationThresholds", func(t *testing.T) { run(t, open, testUtilizationThresholds) })
	t.Run("UpstreamMaxInFlight", func(t *testing.T) { run(t, open, testUpstreamMaxInFlight) })
	t.Run("SessionAffinity", func(t *testing.T) { run(t, open, testSessionAffinity) })
	t.Run("QuotaWindows", func(t *testing.T) { run(t, open, testQuotaWindows) })
}

// Upstream cooldowns shared between replicas: stored, only extended, read
// back while running, forgotten once over.
func testCooldowns(t *testing.T, open Opener) {
	b := setup(t, open)
	t0 := time.Unix(1_800_000_000, 0)
	got := must(b.st.SyncCooldowns(b.ctx, map[string]time.Time{"up_a": t0.Add(time.Minute), "up_b": t0.Add(10 * time.Second)}, t0))
	if len(got) != 2 || !got["up_a"].Equal(t0.Add(time.Minute)) || !got["up_b"].Equal(t0.Add(10*time.Second)) {
		t.Fatalf("stored %v", got)
	}
	// A shorter cooldown learnt by another replica keeps the longer one;
	// a longer one extends it.
	got = must(b.st.SyncCooldowns(b.ctx, map[string]time.Time{"up_a": t0.Add(time.Second), "up_b": t0.Add(time.Hour)}, t0))
	if !got["up_a"].Equal(t0.Add(time.Minute)) || !got["up_b"].Equal(t0.Add(time.Hour)) {
		t.Fatalf("after a second replica %v", got)
	}
	// Past its end a cooldown is gone.
	got = must(b.st.SyncCooldowns(b.ctx, nil, t0.Add(2*time.Minute)))
	if len(got) != 1 || !got["up_b"].Equal(t0.Add(time.Hour)) {
		t.Fatalf("two minutes later %v", got)
	}
}

// Usage thresholds: none unless given at create, kept by an update that
// does not name them, changed by update and patch, read by the
// configuration load.
func testUtilizationThresholds(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("plain")))
	if u.MaxUtilization5h != 0 || u.MaxUtilization7d != 0 {
		t.Fatalf("default thresholds %d %d", u.MaxUtilization5h, u.MaxUtilization7d)
	}
	eighty, ninety := 80, 90
	spec := apiKeySpec("guarded")
	spec.MaxUtilization5h, spec.MaxUtilization7d = &eighty, &ninety
	if g := must(b.st.CreateUpstream(b.ctx, spec)); g.MaxUtilization5h != 80 || g.MaxUtilization7d != 90 {
		t.Fatalf("created with %d %d", g.MaxUtilization5h, g.MaxUtilization7d)
	}
	spec = apiKeySpec("plain")
	spec.Credential = nil
	spec.MaxUtilization7d = &ninety
	up := must(b.st.UpdateUpstream(b.ctx, u.ID, u.SpecRevision, spec))
	if up.MaxUtilization5h != 0 || up.MaxUtilization7d != 90 {
		t.Fatalf("updated %d %d", up.MaxUtilization5h, up.MaxUtilization7d)
	}
	p := must(b.st.PatchUpstream(b.ctx, u.ID, up.SpecRevision, store.UpstreamPatch{MaxUtilization5h: &eighty}))
	if p.MaxUtilization5h != 80 || p.MaxUtilization7d != 90 || p.SpecRevision != up.SpecRevision+1 {
		t.Fatalf("patched %+v", p)
	}
	cfg := must(b.st.LoadConfig(b.ctx))
	for _, c := range cfg.Upstreams {
		if c.ID == u.ID && (c.MaxUtilization5h != 80 || c.MaxUtilization7d != 90) {
			t.Fatalf("configuration read %d %d", c.MaxUtilization5h, c.MaxUtilization7d)
		}
	}
}

// An upstream's cap on requests in flight: none unless given at create,
// kept by an update that does not name it, changed by update and patch,
// read by the configuration load.
func testUpstreamMaxInFlight(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("plain")))
	if u.MaxInFlight != 0 {
		t.Fatalf("default cap %d", u.MaxInFlight)
	}
	two, five := 2, 5
	spec := apiKeySpec("capped")
	spec.MaxInFlight = &two
	if g := must(b.st.CreateUpstream(b.ctx, spec)); g.MaxInFlight != 2 {
		t.Fatalf("created with %d", g.MaxInFlight)
	}
	spec = apiKeySpec("plain")
	spec.Credential = nil
	spec.MaxInFlight = &five
	up := must(b.st.UpdateUpstream(b.ctx, u.ID, u.SpecRevision, spec))
	if up.MaxInFlight != 5 {
		t.Fatalf("updated %d", up.MaxInFlight)
	}
	spec.MaxInFlight = nil
	up = must(b.st.UpdateUpstream(b.ctx, u.ID, up.SpecRevision, spec))
	if up.MaxInFlight != 5 {
		t.Fatalf("an update not naming it changed it to %d", up.MaxInFlight)
	}
	p := must(b.st.PatchUpstream(b.ctx, u.ID, up.SpecRevision, store.UpstreamPatch{MaxInFlight: &two}))
	if p.MaxInFlight != 2 || p.SpecRevision != up.SpecRevision+1 {
		t.Fatalf("patched %+v", p)
	}
	cfg := must(b.st.LoadConfig(b.ctx))
	for _, c := range cfg.Upstreams {
		if c.ID == u.ID && c.MaxInFlight != 2 {
			t.Fatalf("configuration read %d", c.MaxInFlight)
		}
	}
}

// Session moves shared between replicas: stored, a newer record replaces
// an older one and never the reverse, read back from a time on, pruned
// with upstream_affinity.
func testSessionAffinity(t *testing.T, open Opener) {
	b := setup(t, open)
	t0 := time.UnixMilli(1_800_000_000_000)
	got := must(b.st.SyncAffinity(b.ctx, []store.SessionMove{
		{SessionKey: "k1", UpstreamID: "up_a", At: t0},
		{SessionKey: "k2", UpstreamID: "up_b", At: t0.Add(time.Minute)},
	}, t0))
	if len(got) != 2 || got[0].SessionKey != "k1" || got[0].UpstreamID != "up_a" || !got[0].At.Equal(t0) || got[1].UpstreamID != "up_b" {
		t.Fatalf("stored %+v", got)
	}
	// Another replica's older record of k2 loses; a newer one of k1 wins.
	got = must(b.st.SyncAffinity(b.ctx, []store.SessionMove{
		{SessionKey: "k1", UpstreamID: "up_c", At: t0.Add(2 * time.Minute)},
		{SessionKey: "k2", UpstreamID: "up_a", At: t0.Add(time.Second)},
	}, t0.Add(time.Minute)))
	if len(got) != 2 || got[0].UpstreamID != "up_c" || got[1].UpstreamID != "up_b" {
		t.Fatalf("after a second replica %+v", got)
	}
	// Only records from since on are read.
	if got = must(b.st.SyncAffinity(b.ctx, nil, t0.Add(90*time.Second))); len(got) != 1 || got[0].SessionKey != "k1" {
		t.Fatalf("since 90 s %+v", got)
	}
	if n := must(b.st.Prune(b.ctx, "upstream_affinity", t0.Add(90*time.Second))); n != 1 {
		t.Fatalf("pruned %d, want the record of k2", n)
	}
	if got = must(b.st.SyncAffinity(b.ctx, nil, t0)); len(got) != 1 || got[0].SessionKey != "k1" {
		t.Fatalf("after pruning %+v", got)
	}
}

// The polled usage windows of every observed upstream, for the router.
func testQuotaWindows(t *testing.T, open Opener) {
	b := setup(t, open)
	u := oauthUpstream(t, b, "sub")
	if got := must(b.st.ListQuotaWindows(b.ctx)); len(got) != 0 {
		t.Fatalf("before any poll %v", got)
	}
	t0 := b.clk.Now()
	must(b.st.PutQuota(b.ctx, observation(u.ID, u.CredentialVersion, t0, ""), 5*time.Minute))
	got := must(b.st.ListQuotaWindows(b.ctx))
	w, ok := got[u.ID]
	if !ok || len(got) != 1 || w.FiveHour.Utilization != 40 || w.FiveHour.ResetsAt == nil || !w.FiveHour.ResetsAt.Equal(t0.Add(3*time.Hour)) ||
		w.SevenDay.Utilization != 10 || w.SevenDay.ResetsAt != nil {
		t.Fatalf("windows %+v", got)
	}
}

// An upstream's routing weight: DefaultWeight unless given at create, kept
// by an update that does not name it, changed by update and patch (a
// user-managed field: the revision moves).
func testUpstreamWeight(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("plain")))
	if u.Weight != store.DefaultWeight {
		t.Fatalf("default weight %d", u.Weight)
	}
	three, zero := 3, 0
	spec := apiKeySpec("heavy")
	spec.Weight = &three
	if w := must(b.st.CreateUpstream(b.ctx, spec)); w.Weight != 3 {
		t.Fatalf("created with weight %d, want 3", w.Weight)
	}
	spec = apiKeySpec("plain")
	spec.Credential = nil
	up := must(b.st.UpdateUpstream(b.ctx, u.ID, u.SpecRevision, spec))
	if up.Weight != store.DefaultWeight {
		t.Fatalf("an update without weight changed it to %d", up.Weight)
	}
	spec.Weight = &three
	up = must(b.st.UpdateUpstream(b.ctx, u.ID, up.SpecRevision, spec))
	if up.Weight != 3 {
		t.Fatalf("updated weight %d", up.Weight)
	}
	p := must(b.st.PatchUpstream(b.ctx, u.ID, up.SpecRevision, store.UpstreamPatch{Weight: &zero}))
	if p.Weight != 0 || p.SpecRevision != up.SpecRevision+1 {
		t.Fatalf("patched %+v", p)
	}
	cfg := must(b.st.LoadConfig(b.ctx))
	for _, c := range cfg.Upstreams {
		if c.ID == u.ID && c.Weight != 0 {
			t.Fatalf("configuration read weight %d", c.Weight)
		}
	}
}

// P-UP-1, P-UP-6, P-UP-11, P-UP-12 (conflict): create, read, update, patch,
// soft delete, name reuse, optimistic locking.
func testUpstreams(t *testing.T, open Opener) {
	b := setup(t, open)
	gen0 := must(b.st.ConfigGeneration(b.ctx))
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("main")))
	if u.ID == "" || u.SpecRevision != 1 || !u.Enabled || u.CredentialVersion != 1 || string(u.Credential) != "ct-main" {
		t.Fatalf("created %+v", u)
	}
	if !u.CreatedAt.Equal(b.clk.Now()) {
		t.Fatalf("created_at %v, want %v", u.CreatedAt, b.clk.Now())
	}
	if g := must(b.st.ConfigGeneration(b.ctx)); g != gen0+1 {
		t.Fatalf("generation %d after create, want %d", g, gen0+1)
	}
	_, err := b.st.CreateUpstream(b.ctx, apiKeySpec("main"))
	wantErr(t, err, store.ErrConflict)

	given := apiKeySpec("given-id")
	given.ID = "up_fixed"
	if got := must(b.st.CreateUpstream(b.ctx, given)); got.ID != "up_fixed" {
		t.Fatalf("id %s", got.ID)
	}

	got := must(b.st.GetUpstream(b.ctx, u.ID))
	if got.Name != "main" || got.Kind != store.KindVendorAPIKey || got.BaseURL != "https://api.example" {
		t.Fatalf("get %+v", got)
	}
	_, err = b.st.GetUpstream(b.ctx, "up_missing")
	wantErr(t, err, store.ErrNotFound)

	b.clk.Advance(time.Minute)
	spec := apiKeySpec("renamed")
	spec.Credential = nil
	spec.BaseURL = "https://api.example/v1" // the same origin: the credential stays (CredentialStaysWithItsOrigin)
	up := must(b.st.UpdateUpstream(b.ctx, u.ID, 1, spec))
	if up.SpecRevision != 2 || up.Name != "renamed" || up.BaseURL != "https://api.example/v1" || string(up.Credential) != "ct-main" || !up.UpdatedAt.Equal(b.clk.Now()) {
		t.Fatalf("updated %+v", up)
	}
	_, err = b.st.UpdateUpstream(b.ctx, u.ID, 1, spec)
	wantErr(t, err, store.ErrStaleRevision)
	_, err = b.st.UpdateUpstream(b.ctx, "up_missing", 1, spec)
	wantErr(t, err, store.ErrNotFound)
	// A failed update changed nothing.
	if again := must(b.st.GetUpstream(b.ctx, u.ID)); again.SpecRevision != 2 || again.Name != "renamed" {
		t.Fatalf("failed update changed the row: %+v", again)
	}

	off, on := false, true
	p := must(b.st.PatchUpstream(b.ctx, u.ID, store.AnyRevision, store.UpstreamPatch{Enabled: &off, WarmupEnabled: &on}))
	if p.SpecRevision != 3 || p.Enabled || !p.WarmupEnabled {
		t.Fatalf("patched %+v", p)
	}
	dialect := plugin(b, "dialect", store.SlotWarmupDialect).ID
	p = must(b.st.PatchUpstream(b.ctx, u.ID, 3, store.UpstreamPatch{SetWarmupDialect: true, WarmupDialectPlugin: &dialect}))
	if p.WarmupDialectPlugin == nil || *p.WarmupDialectPlugin != dialect || p.SpecRevision != 4 {
		t.Fatalf("dialect %+v", p)
	}
	p = must(b.st.PatchUpstream(b.ctx, u.ID, 4, store.UpstreamPatch{SetWarmupDialect: true}))
	if p.WarmupDialectPlugin != nil {
		t.Fatal("dialect not cleared")
	}

	wantErr(t, b.st.DeleteUpstream(b.ctx, u.ID, 1), store.ErrStaleRevision)
	if err := b.st.DeleteUpstream(b.ctx, u.ID, p.SpecRevision); err != nil {
		t.Fatal(err)
	}
	_, err = b.st.GetUpstream(b.ctx, u.ID)
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, b.st.DeleteUpstream(b.ctx, u.ID, store.AnyRevision), store.ErrNotFound)
	// The name of a deleted upstream is free again.
	must(b.st.CreateUpstream(b.ctx, apiKeySpec("renamed")))
	list := must(b.st.ListUpstreams(b.ctx))
	if len(list) != 2 {
		t.Fatalf("list %d", len(list))
	}
}

// P-API-2: concurrent writers with the same expected revision: exactly one
// wins, the others get stale_revision, nothing is lost or doubled.
func testUpstreamConcurrency(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("race")))
	const writers = 12
	var ok, stale atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("w%d", i)
			_, err := b.st.PatchUpstream(b.ctx, u.ID, u.SpecRevision, store.UpstreamPatch{Name: &name})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, store.ErrStaleRevision):
				stale.Add(1)
			default:
				t.Errorf("writer %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	if ok.Load() != 1 || stale.Load() != writers-1 {
		t.Fatalf("ok=%d stale=%d", ok.Load(), stale.Load())
	}
	if got := must(b.st.GetUpstream(b.ctx, u.ID)); got.SpecRevision != u.SpecRevision+1 {
		t.Fatalf("revision %d", got.SpecRevision)
	}
	// Unconditional writers all apply, one revision each.
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			on := true
			if _, err := b.st.PatchUpstream(b.ctx, u.ID, store.AnyRevision, store.UpstreamPatch{Enabled: &on}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got := must(b.st.GetUpstream(b.ctx, u.ID)); got.SpecRevision != u.SpecRevision+1+writers {
		t.Fatalf("lost updates: revision %d", got.SpecRevision)
	}
	// Concurrent creates of one name: exactly one succeeds.
	var created atomic.Int64
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.st.CreateUpstream(b.ctx, apiKeySpec("same-name"))
			if err == nil {
				created.Add(1)
			} else if !errors.Is(err, store.ErrConflict) {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Fatalf("created %d upstreams with one name", created.Load())
	}
}

// P-UP-6, P-UP-7: background writes (status, credential) never bump
// spec_revision; a status write does not bump the config generation.
func testBackgroundWrites(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: "https://x", Enabled: true, WarmupEnabled: true}))
	if u.Credential != nil || u.CredentialVersion != 0 {
		t.Fatalf("credential on create: %+v", u)
	}
	gen := must(b.st.ConfigGeneration(b.ctx))
	now := b.clk.Now()
	msg := "boom"
	if err := b.st.SetUpstreamStatus(b.ctx, u.ID, store.UpstreamStatus{LastApplyError: &msg, LastApplyAt: &now, LastWarmupAt: &now}); err != nil {
		t.Fatal(err)
	}
	got := must(b.st.GetUpstream(b.ctx, u.ID))
	if got.SpecRevision != u.SpecRevision || got.Status.LastApplyError == nil || *got.Status.LastApplyError != "boom" ||
		got.Status.LastApplyAt == nil || !got.Status.LastApplyAt.Equal(now) {
		t.Fatalf("status write: %+v", got)
	}
	// The apply writer owns the apply columns only: last_warmup_at is the
	// warm-up's (WriteCycleKey).
	if got.Status.LastWarmupAt != nil {
		t.Fatalf("the apply writer wrote last_warmup_at: %v", got.Status.LastWarmupAt)
	}
	if g := must(b.st.ConfigGeneration(b.ctx)); g != gen {
		t.Fatal("status write bumped the config generation")
	}
	c := must(b.st.SetUpstreamCredential(b.ctx, u.ID, "oauth", []byte("sealed")))
	if c.SpecRevision != u.SpecRevision || c.CredentialVersion != 1 || c.CredentialKind != "oauth" || string(c.Credential) != "sealed" {
		t.Fatalf("credential write: %+v", c)
	}
	if g := must(b.st.ConfigGeneration(b.ctx)); g != gen+1 {
		t.Fatal("a credential change must reach the snapshots")
	}
	wantErr(t, b.st.SetUpstreamStatus(b.ctx, "up_missing", store.UpstreamStatus{}), store.ErrNotFound)
	_, err := b.st.SetUpstreamCredential(b.ctx, "up_missing", "oauth", nil)
	wantErr(t, err, store.ErrNotFound)
}

// Each status writer owns its columns: a snapshot rebuild recording its
// apply outcome (from a read taken before the others wrote) undoes neither
// the refresh failure nor the warm-up stamp; a refresh failure of a
// replaced credential is moot; a new credential clears the refresh record.
func testStatusWriters(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: "https://x", Enabled: true}))
	u = must(b.st.SetUpstreamCredential(b.ctx, u.ID, "oauth", []byte("v1")))
	stale := must(b.st.GetUpstream(b.ctx, u.ID)) // what a rebuild read before the others wrote
	now := b.clk.Now()
	gen := must(b.st.ConfigGeneration(b.ctx))
	if !must(b.st.RecordRefreshFailure(b.ctx, u.ID, u.CredentialVersion, "refused: invalid_grant", true, now)) {
		t.Fatal("refresh failure of the current credential not recorded")
	}
	must(b.st.WriteCycleKey(b.ctx, u.ID, "5h:1", now))
	// The rebuild writes back its stale status with a clean apply.
	st := stale.Status
	st.LastApplyError, st.LastApplyAt = nil, &now
	must(0, b.st.SetUpstreamStatus(b.ctx, u.ID, st))
	got := must(b.st.GetUpstream(b.ctx, u.ID)).Status
	if got.RefreshError == nil || *got.RefreshError != "refused: invalid_grant" || !got.RefreshRefused || got.RefreshErrorAt == nil || !got.RefreshErrorAt.Equal(now) {
		t.Fatalf("the rebuild wiped the refresh failure: %+v", got)
	}
	if got.LastWarmupAt == nil || !got.LastWarmupAt.Equal(now) {
		t.Fatalf("the rebuild wiped the warm-up stamp: %+v", got)
	}
	if e := got.Error(); e == nil || *e != "refused: invalid_grant" {
		t.Fatalf("operator's error = %v", e)
	}
	// The refusal takes the upstream out of routing: a configuration
	// change naming it, which replicas apply as a delta.
	if must(b.st.ConfigGeneration(b.ctx)) != gen+1 {
		t.Fatal("a refused refresh is not a configuration change")
	}
	d := must(b.st.LoadConfigDelta(b.ctx, gen))
	if len(d.Upstreams) != 1 || d.Upstreams[0].ID != u.ID || !d.Upstreams[0].Status.RefreshRefused {
		t.Fatalf("the delta after a refusal: %+v", d.Upstreams)
	}
	gen++
	// An apply error takes precedence in what the operator reads.
	applyErr := "credential cannot be opened"
	must(0, b.st.SetUpstreamStatus(b.ctx, u.ID, store.UpstreamStatus{LastApplyError: &applyErr}))
	if e := must(b.st.GetUpstream(b.ctx, u.ID)).Status.Error(); e == nil || *e != applyErr {
		t.Fatalf("operator's error = %v", e)
	}
	must(0, b.st.SetUpstreamStatus(b.ctx, u.ID, store.UpstreamStatus{LastApplyAt: &now}))

	// A failure of a replaced credential changes nothing.
	u2 := must(b.st.SetUpstreamCredential(b.ctx, u.ID, "oauth", []byte("v2")))
	got = must(b.st.GetUpstream(b.ctx, u.ID)).Status
	if got.RefreshError != nil || got.RefreshRefused || got.RefreshErrorAt != nil {
		t.Fatalf("a new credential kept the old refresh failure: %+v", got)
	}
	if must(b.st.RecordRefreshFailure(b.ctx, u.ID, u.CredentialVersion, "late", false, now)) {
		t.Fatal("a failure of a replaced credential was recorded")
	}
	gen = must(b.st.ConfigGeneration(b.ctx))
	if must(b.st.RecordRefreshFailure(b.ctx, u.ID, u.CredentialVersion, "late refusal", true, now)) {
		t.Fatal("a refusal of a replaced credential was recorded")
	}
	if !must(b.st.RecordRefreshFailure(b.ctx, u.ID, u2.CredentialVersion, "token endpoint down", false, now)) {
		t.Fatal("transient failure not recorded")
	}
	if must(b.st.ConfigGeneration(b.ctx)) != gen {
		t.Fatal("a moot refusal or a transient failure bumped the config generation")
	}
	got = must(b.st.GetUpstream(b.ctx, u.ID)).Status
	if got.RefreshError == nil || *got.RefreshError != "token endpoint down" || got.RefreshRefused {
		t.Fatalf("transient failure: %+v", got)
	}
	if must(b.st.RecordRefreshFailure(b.ctx, "up_missing", 1, "x", false, now)) {
		t.Fatal("recorded on a missing upstream")
	}
}

// Concurrent writers of different status columns never lose each other's
// writes, whatever the interleaving.
func testStatusWritersConcurrent(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: "https://x", Enabled: true}))
	u = must(b.st.SetUpstreamCredential(b.ctx, u.ID, "oauth", []byte("v1")))
	stale := must(b.st.GetUpstream(b.ctx, u.ID)).Status
	base := b.clk.Now()
	const rounds = 20
	var wg sync.WaitGroup
	errs := make(chan error, 3*rounds)
	for i := 0; i < rounds; i++ {
		at := base.Add(time.Duration(i) * time.Second)
		wg.Add(3)
		go func() {
			defer wg.Done()
			st := stale
			st.LastApplyError, st.LastApplyAt = nil, &at
			errs <- b.st.SetUpstreamStatus(b.ctx, u.ID, st)
		}()
		go func() {
			defer wg.Done()
			_, err := b.st.WriteCycleKey(b.ctx, u.ID, fmt.Sprintf("5h:%d", i), at)
			errs <- err
		}()
		go func() {
			defer wg.Done()
			_, err := b.st.RecordRefreshFailure(b.ctx, u.ID, u.CredentialVersion, fmt.Sprintf("failure %d", i), false, at)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := must(b.st.GetUpstream(b.ctx, u.ID)).Status
	if got.LastWarmupAt == nil || got.RefreshError == nil || got.RefreshErrorAt == nil || got.LastApplyAt == nil {
		t.Fatalf("a concurrent writer lost another's column: %+v", got)
	}
}

// P-WARM-R3: the storage-level mass disable turns warm-up off on every
// non-deleted vendor_oauth upstream, bumping spec_revision and updated time.
func testMassDisable(t *testing.T, open Opener) {
	b := setup(t, open)
	mk := func(name, kind string, warm bool) *store.Upstream {
		return must(b.st.CreateUpstream(b.ctx, store.UpstreamSpec{Name: name, Kind: kind, BaseURL: "https://x", Enabled: true, WarmupEnabled: warm}))
	}
	a, c := mk("a", store.KindVendorOAuth, true), mk("c", store.KindVendorOAuth, false)
	k := mk("k", store.KindVendorAPIKey, false)
	gone := mk("gone", store.KindVendorOAuth, true)
	if err := b.st.DeleteUpstream(b.ctx, gone.ID, store.AnyRevision); err != nil {
		t.Fatal(err)
	}
	gen := must(b.st.ConfigGeneration(b.ctx))
	b.clk.Advance(time.Hour)
	n := must(b.st.DisableWarmupForOAuthUpstreams(b.ctx))
	if n != 1 {
		t.Fatalf("disabled %d, want 1", n)
	}
	got := must(b.st.GetUpstream(b.ctx, a.ID))
	if got.WarmupEnabled || got.SpecRevision != a.SpecRevision+1 || !got.UpdatedAt.Equal(b.clk.Now()) {
		t.Fatalf("a after mass disable: %+v", got)
	}
	for _, u := range []*store.Upstream{c, k} {
		if g := must(b.st.GetUpstream(b.ctx, u.ID)); g.SpecRevision != u.SpecRevision {
			t.Fatalf("%s touched", u.Name)
		}
	}
	if g := must(b.st.ConfigGeneration(b.ctx)); g <= gen {
		t.Fatal("replicas would not notice the mass disable")
	}
}

// P-UP-11: an upstream named by a chain entry's config cannot be deleted.
func testReferenced(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("pinned")))
	p := must(b.st.CreatePrincipal(b.ctx, principal("p")))
	chain := must(b.st.ListChain(b.ctx, p.ID))
	setChainConfig(t, b, chain[0].ID, fmt.Sprintf(`{"upstream_ids":["%s"]}`, u.ID))
	err := b.st.DeleteUpstream(b.ctx, u.ID, store.AnyRevision)
	wantErr(t, err, store.ErrReferenced)
	var re *store.ReferencedError
	if !errors.As(err, &re) || len(re.References) != 1 || re.References[0].ID != chain[0].ID || re.References[0].Owner != p.ID {
		t.Fatalf("references %+v", re)
	}
	if _, err := b.st.GetUpstream(b.ctx, u.ID); err != nil {
		t.Fatal("refused delete removed the upstream")
	}
	setChainConfig(t, b, chain[0].ID, `{}`)
	if err := b.st.DeleteUpstream(b.ctx, u.ID, store.AnyRevision); err != nil {
		t.Fatal(err)
	}
}

func setChainConfig(t *testing.T, b *bundle, id, cfg string) {
	t.Helper()
	e := must(b.st.UpdateChainEntry(b.ctx, id, store.AnyRevision, json.RawMessage(cfg), true))
	if string(e.Config) == "" || e.Revision < 2 {
		t.Fatalf("entry %+v", e)
	}
	_, err := b.st.UpdateChainEntry(b.ctx, id, 1, json.RawMessage(cfg), true)
	wantErr(t, err, store.ErrStaleRevision)
	_, err = b.st.UpdateChainEntry(b.ctx, "ce_missing", store.AnyRevision, json.RawMessage(cfg), true)
	wantErr(t, err, store.ErrNotFound)
}

// P-UP-11: references through upstream_id and upstream_ids, across
// principals, matched exactly (an id that merely contains another is not a
// reference to it).
func testReferenceMatching(t *testing.T, open Opener) {
	b := setup(t, open)
	mk := func(id, name string) *store.Upstream {
		s := apiKeySpec(name)
		s.ID = id
		return must(b.st.CreateUpstream(b.ctx, s))
	}
	a, a2 := mk("up_ref", "a"), mk("up_ref0", "a0")
	entryOf := func(name, cfg string) store.ChainEntry {
		p := must(b.st.CreatePrincipal(b.ctx, principal(name)))
		e := must(b.st.ListChain(b.ctx, p.ID))[0]
		return *must(b.st.UpdateChainEntry(b.ctx, e.ID, store.AnyRevision, json.RawMessage(cfg), true))
	}
	one := entryOf("p1", `{"upstream_id":"up_ref"}`)
	many := entryOf("p2", `{"upstream_ids":["up_other","up_ref"]}`)
	entryOf("p3", `{"upstream_id":"up_ref0","note":"up_ref"}`)
	err := b.st.DeleteUpstream(b.ctx, a.ID, store.AnyRevision)
	var re *store.ReferencedError
	if !errors.As(err, &re) {
		t.Fatalf("delete: %v", err)
	}
	got := map[string]string{}
	for _, r := range re.References {
		if r.Kind != "plugin_chain_entry" {
			t.Fatalf("reference kind %q", r.Kind)
		}
		got[r.ID] = r.Owner
	}
	if len(got) != 2 || got[one.ID] != one.PrincipalID || got[many.ID] != many.PrincipalID {
		t.Fatalf("references %+v, want %s and %s", re.References, one.ID, many.ID)
	}
	wantErr(t, b.st.DeleteUpstream(b.ctx, a2.ID, store.AnyRevision), store.ErrReferenced)
	// Deleting the principal drops its entries, and with them the reference.
	for _, e := range []store.ChainEntry{one, many} {
		if err := b.st.DeletePrincipal(b.ctx, e.PrincipalID, store.AnyRevision); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.st.DeleteUpstream(b.ctx, a.ID, store.AnyRevision); err != nil {
		t.Fatal(err)
	}
}
