// Package storetest is the one behavioural suite every store driver passes.
// Driver packages call Exercise with a function that opens a fresh, empty,
// migrated store per call.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// Opener opens a fresh store driven by clk.
type Opener func(t *testing.T, clk *fakeclock.Clock) store.Store

type bundle struct {
	st  store.Store
	clk *fakeclock.Clock
	ctx context.Context
}

func setup(t *testing.T, open Opener) *bundle {
	t.Helper()
	clk := fakeclock.New(time.Time{})
	st := open(t, clk)
	t.Cleanup(func() { st.Close() })
	return &bundle{st: st, clk: clk, ctx: context.Background()}
}

// must returns v, or aborts the running check with err. It panics with a
// failure that run turns into t.Fatal, so calls nest inside expressions.
func must[T any](v T, err error) T {
	if err != nil {
		_, file, line, _ := runtime.Caller(1)
		panic(failure(fmt.Sprintf("%s:%d: unexpected error: %v", filepath.Base(file), line, err)))
	}
	return v
}

type failure string

// run executes one check, turning a must failure into t.Fatal.
func run(t *testing.T, open Opener, check func(*testing.T, Opener)) {
	t.Parallel()
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(failure); ok {
				t.Fatal(string(f))
			}
			panic(r)
		}
	}()
	check(t, open)
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

func apiKeySpec(name string) store.UpstreamSpec {
	return store.UpstreamSpec{Name: name, Kind: store.KindVendorAPIKey, BaseURL: "https://api.example", Enabled: true,
		Credential: []byte("ct-" + name), CredentialKind: "api_key"}
}

func principal(name string) store.Principal {
	return store.Principal{Name: name, Kind: "machine", Enabled: true, AllowedModels: []string{"claude-*"}}
}

// Exercise runs the suite.
func Exercise(t *testing.T, open Opener) {
	t.Run("Upstreams", func(t *testing.T) { run(t, open, testUpstreams) })
	t.Run("UpstreamConcurrency", func(t *testing.T) { run(t, open, testUpstreamConcurrency) })
	t.Run("BackgroundWrites", func(t *testing.T) { run(t, open, testBackgroundWrites) })
	t.Run("StatusWriters", func(t *testing.T) { run(t, open, testStatusWriters) })
	t.Run("StatusWritersConcurrent", func(t *testing.T) { run(t, open, testStatusWritersConcurrent) })
	t.Run("MassDisableWarmup", func(t *testing.T) { run(t, open, testMassDisable) })
	t.Run("Principals", func(t *testing.T) { run(t, open, testPrincipals) })
	t.Run("Keys", func(t *testing.T) { run(t, open, testKeys) })
	t.Run("ReferencedDelete", func(t *testing.T) { run(t, open, testReferenced) })
	t.Run("LoadConfig", func(t *testing.T) { run(t, open, testLoadConfig) })
	t.Run("LoadConfigSnapshot", func(t *testing.T) { run(t, open, testLoadConfigSnapshot) })
	t.Run("RequestEvents", func(t *testing.T) { run(t, open, testEvents) })
	t.Run("RollupAndPrune", func(t *testing.T) { run(t, open, testRollupAndPrune) })
	t.Run("Metadata", func(t *testing.T) { run(t, open, testMetadata) })
	t.Run("AuditAndAffinity", func(t *testing.T) { run(t, open, testAuditAndAffinity) })
	t.Run("Generations", func(t *testing.T) { run(t, open, testGenerations) })
	t.Run("PrincipalConcurrency", func(t *testing.T) { run(t, open, testPrincipalConcurrency) })
	t.Run("ReferenceMatching", func(t *testing.T) { run(t, open, testReferenceMatching) })
	t.Run("Ordering", func(t *testing.T) { run(t, open, testOrdering) })
	t.Run("Unavailable", func(t *testing.T) { run(t, open, testUnavailable) })
	exerciseOAuth(t, open)
	exerciseKeepAlive(t, open)
	exercisePlugins(t, open)
	exerciseLimits(t, open)
	exerciseSealed(t, open)
	exerciseEventReader(t, open) // dashboard: request log and live traffic
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
	spec.BaseURL = "https://other.example"
	up := must(b.st.UpdateUpstream(b.ctx, u.ID, 1, spec))
	if up.SpecRevision != 2 || up.Name != "renamed" || up.BaseURL != "https://other.example" || string(up.Credential) != "ct-main" || !up.UpdatedAt.Equal(b.clk.Now()) {
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
	if must(b.st.ConfigGeneration(b.ctx)) != gen {
		t.Fatal("a refresh failure bumped the config generation")
	}
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
	if !must(b.st.RecordRefreshFailure(b.ctx, u.ID, u2.CredentialVersion, "token endpoint down", false, now)) {
		t.Fatal("transient failure not recorded")
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

// P-PR-1, P-PR-4, P-PR-5, P-PR-6, P-PR-7.
func testPrincipals(t *testing.T, open Opener) {
	b := setup(t, open)
	ka := json.RawMessage(`{"enabled":true,"max_refreshes_per_session":3}`)
	in := principal("app")
	in.DefaultLimits = json.RawMessage(`[{"kind":"requests","window_secs":60,"max":5}]`)
	in.CacheKeepalive = ka
	p := must(b.st.CreatePrincipal(b.ctx, in))
	if p.ID == "" || p.Revision != 1 || !p.Enabled || len(p.AllowedModels) != 1 || string(p.CacheKeepalive) == "" {
		t.Fatalf("created %+v", p)
	}
	var kav map[string]any
	if json.Unmarshal(p.CacheKeepalive, &kav) != nil || kav["max_refreshes_per_session"] != float64(3) {
		t.Fatalf("keepalive %s", p.CacheKeepalive)
	}
	_, err := b.st.CreatePrincipal(b.ctx, principal("app"))
	wantErr(t, err, store.ErrConflict)

	// The built-in router entry is seeded at position 0.
	chain := must(b.st.ListChain(b.ctx, p.ID))
	if len(chain) != 1 || chain[0].Slot != store.SlotRouter || chain[0].Builtin == nil ||
		*chain[0].Builtin != store.BuiltinSubscriptionPreference || chain[0].Position != 0 || !chain[0].Enabled || chain[0].WasmRegistryID != nil {
		t.Fatalf("chain %+v", chain)
	}
	_, err = b.st.ListChain(b.ctx, "pr_missing")
	wantErr(t, err, store.ErrNotFound)

	bare := must(b.st.CreatePrincipal(b.ctx, store.Principal{Name: "bare", Kind: "user", Enabled: true}))
	if bare.AllowedModels == nil || len(bare.AllowedModels) != 0 || string(bare.DefaultLimits) != "[]" || bare.CacheKeepalive != nil {
		t.Fatalf("bare %+v", bare)
	}

	upd := principal("app2")
	upd.AllowedModels = []string{"*"}
	u := must(b.st.UpdatePrincipal(b.ctx, p.ID, 1, upd))
	if u.Revision != 2 || u.Name != "app2" || u.AllowedModels[0] != "*" || u.CacheKeepalive != nil {
		t.Fatalf("updated %+v", u)
	}
	_, err = b.st.UpdatePrincipal(b.ctx, p.ID, 1, upd)
	wantErr(t, err, store.ErrStaleRevision)
	_, err = b.st.UpdatePrincipal(b.ctx, "pr_missing", 1, upd)
	wantErr(t, err, store.ErrNotFound)
	_, err = b.st.UpdatePrincipal(b.ctx, p.ID, 2, principal("bare"))
	wantErr(t, err, store.ErrConflict)

	off := false
	models := []string{"a", "b"}
	pp := must(b.st.PatchPrincipal(b.ctx, p.ID, 2, store.PrincipalPatch{Enabled: &off, AllowedModels: &models, SetCacheKeepalive: true, CacheKeepalive: ka}))
	if pp.Enabled || len(pp.AllowedModels) != 2 || pp.CacheKeepalive == nil || pp.Revision != 3 || pp.Name != "app2" {
		t.Fatalf("patched %+v", pp)
	}
	pp = must(b.st.PatchPrincipal(b.ctx, p.ID, store.AnyRevision, store.PrincipalPatch{SetCacheKeepalive: true}))
	if pp.CacheKeepalive != nil {
		t.Fatal("null did not clear cache_keepalive")
	}
	wantErr(t, b.st.DeletePrincipal(b.ctx, p.ID, 1), store.ErrStaleRevision)
	must(b.st.CreateKey(b.ctx, store.Key{PrincipalID: p.ID, Name: "k", Prefix: "sk-px-x", Hash: hash("x")}))
	if err := b.st.DeletePrincipal(b.ctx, p.ID, pp.Revision); err != nil {
		t.Fatal(err)
	}
	_, err = b.st.GetPrincipal(b.ctx, p.ID)
	wantErr(t, err, store.ErrNotFound)
	cfg := must(b.st.LoadConfig(b.ctx))
	for _, k := range cfg.Keys {
		if k.PrincipalID == p.ID {
			t.Fatal("keys survived their principal")
		}
	}
	for _, e := range cfg.Chains {
		if e.PrincipalID == p.ID {
			t.Fatal("chain entries survived their principal")
		}
	}
	wantErr(t, b.st.DeletePrincipal(b.ctx, p.ID, store.AnyRevision), store.ErrNotFound)
	if n := len(must(b.st.ListPrincipals(b.ctx))); n != 1 {
		t.Fatalf("list %d", n)
	}
}

func hash(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }

// P-KEY-1 (storage side): only the hash is kept; revocation is idempotent.
func testKeys(t *testing.T, open Opener) {
	b := setup(t, open)
	p := must(b.st.CreatePrincipal(b.ctx, principal("p")))
	k := must(b.st.CreateKey(b.ctx, store.Key{PrincipalID: p.ID, Name: "ci", Prefix: "sk-px-abcd", Hash: hash("plain")}))
	if k.ID == "" || k.RevokedAt != nil {
		t.Fatalf("key %+v", k)
	}
	_, err := b.st.CreateKey(b.ctx, store.Key{PrincipalID: p.ID, Prefix: "x", Hash: hash("plain")})
	wantErr(t, err, store.ErrConflict)
	_, err = b.st.CreateKey(b.ctx, store.Key{PrincipalID: "pr_missing", Prefix: "x", Hash: hash("other")})
	wantErr(t, err, store.ErrNotFound)
	gen := must(b.st.ConfigGeneration(b.ctx))
	b.clk.Advance(time.Second)
	r := must(b.st.RevokeKey(b.ctx, p.ID, k.ID))
	if r.RevokedAt == nil || !r.RevokedAt.Equal(b.clk.Now()) {
		t.Fatalf("revoked %+v", r)
	}
	b.clk.Advance(time.Second)
	r2 := must(b.st.RevokeKey(b.ctx, p.ID, k.ID))
	if !r2.RevokedAt.Equal(*r.RevokedAt) {
		t.Fatal("second revoke moved revoked_at")
	}
	if must(b.st.ConfigGeneration(b.ctx)) <= gen {
		t.Fatal("revocation must reach the snapshots")
	}
	_, err = b.st.RevokeKey(b.ctx, p.ID, "key_missing")
	wantErr(t, err, store.ErrNotFound)
	keys := must(b.st.ListKeys(b.ctx, p.ID))
	if len(keys) != 1 || keys[0].RevokedAt == nil {
		t.Fatalf("list %+v", keys)
	}
	cfg := must(b.st.LoadConfig(b.ctx))
	if len(cfg.Keys) != 0 {
		t.Fatal("revoked key in live configuration")
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

// P-RUNTIME-1: the live configuration, read consistently.
func testLoadConfig(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("u1")))
	gone := must(b.st.CreateUpstream(b.ctx, apiKeySpec("u2")))
	if err := b.st.DeleteUpstream(b.ctx, gone.ID, store.AnyRevision); err != nil {
		t.Fatal(err)
	}
	p := must(b.st.CreatePrincipal(b.ctx, principal("p")))
	k := must(b.st.CreateKey(b.ctx, store.Key{PrincipalID: p.ID, Prefix: "x", Hash: hash("k")}))
	cfg := must(b.st.LoadConfig(b.ctx))
	if len(cfg.Upstreams) != 1 || cfg.Upstreams[0].ID != u.ID || len(cfg.Principals) != 1 || len(cfg.Keys) != 1 ||
		cfg.Keys[0].ID != k.ID || string(cfg.Keys[0].Hash) != string(hash("k")) || len(cfg.Chains) != 1 {
		t.Fatalf("config %+v", cfg)
	}
	if cfg.Generation != must(b.st.ConfigGeneration(b.ctx)) {
		t.Fatal("generation mismatch")
	}
	if err := b.st.Ping(b.ctx); err != nil {
		t.Fatal(err)
	}
}

func testEvents(t *testing.T, open Opener) {
	b := setup(t, open)
	base := b.clk.Now()
	var evs []store.RequestEvent
	for i := 0; i < 5; i++ {
		evs = append(evs, store.RequestEvent{At: base.Add(time.Duration(i) * time.Minute), PrincipalID: "pr_1", KeyID: "key_1",
			UpstreamID: "up_1", Model: "m", Stream: i%2 == 0, Status: 200, InputTokens: int64(i), OutputTokens: 2,
			CacheCreationInputTokens: 3, CacheReadInputTokens: 4, DurationMillis: 5})
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	got := must(b.st.ListRequestEvents(b.ctx, base.Add(2*time.Minute), 10))
	if len(got) != 3 || got[0].InputTokens != 4 || !got[0].At.Equal(base.Add(4*time.Minute)) || !got[0].Stream || got[0].CacheReadInputTokens != 4 {
		t.Fatalf("events %+v", got)
	}
	if len(must(b.st.ListRequestEvents(b.ctx, base, 2))) != 2 {
		t.Fatal("limit ignored")
	}
}

// P-JOB-2 (singletons' storage side): hourly rollups recomputed idempotently;
// pruning removes only rows older than the cut-off.
func testRollupAndPrune(t *testing.T, open Opener) {
	b := setup(t, open)
	hour := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	ev := func(at time.Time, principal string, status int, in int64) store.RequestEvent {
		return store.RequestEvent{At: at, PrincipalID: principal, KeyID: "k", UpstreamID: "u", Model: "m", Status: status, InputTokens: in, OutputTokens: 1}
	}
	if err := b.st.InsertRequestEvents(b.ctx, []store.RequestEvent{
		ev(hour.Add(5*time.Minute), "p1", 200, 10), ev(hour.Add(50*time.Minute), "p1", 500, 5),
		ev(hour.Add(70*time.Minute), "p1", 200, 7), ev(hour.Add(10*time.Minute), "p2", 200, 1),
	}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // twice: idempotent
		n := must(b.st.RollupUsage(b.ctx, hour, hour.Add(2*time.Hour)))
		if n != 3 {
			t.Fatalf("run %d: %d buckets, want 3", i, n)
		}
	}
	rs := must(b.st.ListUsageRollups(b.ctx, hour))
	if len(rs) != 3 {
		t.Fatalf("rollups %+v", rs)
	}
	r := rs[0]
	if !r.BucketStart.Equal(hour) || r.PrincipalID != "p1" || r.Requests != 2 || r.Errors != 1 || r.InputTokens != 15 || r.OutputTokens != 2 {
		t.Fatalf("first rollup %+v", r)
	}
	if !rs[2].BucketStart.Equal(hour.Add(time.Hour)) || rs[2].InputTokens != 7 {
		t.Fatalf("second hour %+v", rs[2])
	}
	n := must(b.st.Prune(b.ctx, "request_events", hour.Add(30*time.Minute)))
	if n != 2 {
		t.Fatalf("pruned %d, want 2", n)
	}
	if left := must(b.st.ListRequestEvents(b.ctx, time.Time{}, 10)); len(left) != 2 {
		t.Fatalf("left %d", len(left))
	}
	for _, table := range store.PrunableTables {
		must(b.st.Prune(b.ctx, table, hour))
	}
	if _, err := b.st.Prune(b.ctx, "principals", hour); err == nil {
		t.Fatal("pruned a configuration table")
	}
}

func testMetadata(t *testing.T, open Opener) {
	b := setup(t, open)
	now := b.clk.Now()
	if err := b.st.SetUpstreamModels(b.ctx, "up_1", []store.UpstreamModel{{ModelID: "b", DisplayName: "B", RefreshedAt: now}, {ModelID: "a", DisplayName: "A", RefreshedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.SetUpstreamModels(b.ctx, "up_1", []store.UpstreamModel{{ModelID: "c", DisplayName: "C", RefreshedAt: now}, {ModelID: "a", DisplayName: "A", RefreshedAt: now}}); err != nil {
		t.Fatal(err)
	}
	ms := must(b.st.ListUpstreamModels(b.ctx, "up_1"))
	if len(ms) != 2 || ms[0].ModelID != "a" || ms[1].ModelID != "c" || !ms[0].RefreshedAt.Equal(now) {
		t.Fatalf("models %+v", ms)
	}
	_, err := b.st.GetPriceCatalog(b.ctx)
	wantErr(t, err, store.ErrNotFound)
	c := store.PriceCatalog{Version: "v1", ETag: `"v1"`, Body: json.RawMessage(`{"models":{}}`), FetchedAt: now}
	if changed := must(b.st.PutPriceCatalog(b.ctx, c)); !changed {
		t.Fatal("first catalog not a change")
	}
	if changed := must(b.st.PutPriceCatalog(b.ctx, c)); changed {
		t.Fatal("same version reported as a change")
	}
	c.Version = "v2"
	if changed := must(b.st.PutPriceCatalog(b.ctx, c)); !changed {
		t.Fatal("new version not a change")
	}
	got := must(b.st.GetPriceCatalog(b.ctx))
	if got.Version != "v2" || got.ETag != `"v1"` {
		t.Fatalf("catalog %+v", got)
	}
	// Concurrent writers of one new version: exactly one sees a change;
	// concurrent model refreshes both succeed.
	c.Version = "v3"
	var changes atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := b.st.PutPriceCatalog(b.ctx, c)
			if err != nil {
				t.Error(err)
			}
			if ch {
				changes.Add(1)
			}
			if err := b.st.SetUpstreamModels(b.ctx, "up_2", []store.UpstreamModel{{ModelID: "x", DisplayName: "X", RefreshedAt: now}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if changes.Load() != 1 {
		t.Fatalf("%d writers saw the change", changes.Load())
	}
	if ms := must(b.st.ListUpstreamModels(b.ctx, "up_2")); len(ms) != 1 {
		t.Fatalf("models %+v", ms)
	}
}

// Every configuration change leaves an audit row with its actor; request
// events keep upstream affinity current. Both are what pruning trims.
func testAuditAndAffinity(t *testing.T, open Opener) {
	b := setup(t, open)
	ctx := store.WithActor(b.ctx, "alice")
	u := must(b.st.CreateUpstream(ctx, apiKeySpec("a")))
	on := true
	must(b.st.PatchUpstream(ctx, u.ID, store.AnyRevision, store.UpstreamPatch{Enabled: &on}))
	p := must(b.st.CreatePrincipal(b.ctx, principal("p")))
	_, err := b.st.PatchUpstream(ctx, u.ID, 1, store.UpstreamPatch{Enabled: &on}) // stale: no audit row
	wantErr(t, err, store.ErrStaleRevision)
	es := must(b.st.ListAudit(b.ctx, time.Time{}, 10))
	if len(es) != 3 {
		t.Fatalf("audit %+v", es)
	}
	seen := map[string]string{}
	for _, e := range es {
		seen[e.ResourceKind+" "+e.Action+" "+e.ResourceID] = e.Actor
	}
	if seen["upstream create "+u.ID] != "alice" || seen["upstream update "+u.ID] != "alice" || seen["principal create "+p.ID] != "system" {
		t.Fatalf("audit %v", seen)
	}
	t0 := b.clk.Now()
	evs := []store.RequestEvent{
		{At: t0, PrincipalID: p.ID, UpstreamID: u.ID, Model: "m", Status: 200},
		{At: t0.Add(time.Minute), PrincipalID: p.ID, UpstreamID: u.ID, Model: "m", Status: 200},
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs[:1]); err != nil { // an older event never moves it back
		t.Fatal(err)
	}
	if n := must(b.st.Prune(b.ctx, "upstream_affinity", t0.Add(30*time.Second))); n != 0 {
		t.Fatalf("affinity at %v pruned: last use was not the newest event", t0)
	}
	if n := must(b.st.Prune(b.ctx, "upstream_affinity", t0.Add(2*time.Minute))); n != 1 {
		t.Fatalf("affinity rows pruned %d, want 1", n)
	}
	if n := must(b.st.Prune(b.ctx, "audit_log", b.clk.Now().Add(time.Second))); n != 3 {
		t.Fatalf("audit rows pruned %d, want 3", n)
	}
}

// P-RUNTIME-2 (storage side): LoadConfig is one consistent snapshot. Only
// creates run, each bumping the generation once in its own transaction, so
// every snapshot holds exactly as many upstreams as its generation says.
func testLoadConfigSnapshot(t *testing.T, open Opener) {
	b := setup(t, open)
	const writes = 40
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < writes; i++ {
			if _, err := b.st.CreateUpstream(b.ctx, apiKeySpec(fmt.Sprintf("snap-%d", i))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { <-done }() // the writer must not outlive the store
	for reads := 0; ; reads++ {
		select {
		case <-done:
			if reads == 0 {
				t.Log("writer finished before the first read")
			}
			return
		default:
		}
		cfg := must(b.st.LoadConfig(b.ctx))
		if int64(len(cfg.Upstreams)) != cfg.Generation {
			t.Fatalf("torn read: generation %d with %d upstreams", cfg.Generation, len(cfg.Upstreams))
		}
	}
}

// P-RUNTIME-3 (storage side): every configuration mutation bumps the config
// generation by exactly one, in its own transaction with its audit row, and
// a user-managed resource's revision by exactly one. Background writes
// (P-UP-6), request events, maintenance, failed mutations and idempotent
// repeats bump nothing and leave no audit row.
func testGenerations(t *testing.T, open Opener) {
	b := setup(t, open)
	step := func(what string, want int64, fn func()) {
		t.Helper()
		gen := must(b.st.ConfigGeneration(b.ctx))
		audits := len(must(b.st.ListAudit(b.ctx, time.Time{}, 10000)))
		fn()
		if d := must(b.st.ConfigGeneration(b.ctx)) - gen; d != want {
			t.Fatalf("%s moved the generation by %d, want %d", what, d, want)
		}
		if d := len(must(b.st.ListAudit(b.ctx, time.Time{}, 10000))) - audits; int64(d) != want {
			t.Fatalf("%s wrote %d audit rows, want %d", what, d, want)
		}
	}
	rev := func(what string, got, want int64) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: revision %d, want %d", what, got, want)
		}
	}
	var u, o *store.Upstream
	step("create upstream", 1, func() { u = must(b.st.CreateUpstream(b.ctx, apiKeySpec("g"))) })
	rev("create upstream", u.SpecRevision, 1)
	step("create oauth upstream", 1, func() {
		o = must(b.st.CreateUpstream(b.ctx, store.UpstreamSpec{Name: "o", Kind: store.KindVendorOAuth, BaseURL: "https://x", WarmupEnabled: true}))
	})
	step("update upstream", 1, func() { u = must(b.st.UpdateUpstream(b.ctx, u.ID, u.SpecRevision, apiKeySpec("g2"))) })
	rev("update upstream", u.SpecRevision, 2)
	name := "g3"
	step("patch upstream", 1, func() { u = must(b.st.PatchUpstream(b.ctx, u.ID, u.SpecRevision, store.UpstreamPatch{Name: &name})) })
	rev("patch upstream", u.SpecRevision, 3)
	step("empty patch", 1, func() { u = must(b.st.PatchUpstream(b.ctx, u.ID, store.AnyRevision, store.UpstreamPatch{})) })
	rev("empty patch", u.SpecRevision, 4)
	step("credential change", 1, func() { u = must(b.st.SetUpstreamCredential(b.ctx, u.ID, "api_key", []byte("new"))) })
	rev("credential change (P-UP-6)", u.SpecRevision, 4)
	step("status write", 0, func() {
		if err := b.st.SetUpstreamStatus(b.ctx, u.ID, store.UpstreamStatus{}); err != nil {
			t.Fatal(err)
		}
	})
	rev("status write (P-UP-6)", must(b.st.GetUpstream(b.ctx, u.ID)).SpecRevision, 4)
	step("mass disable", 1, func() {
		if n := must(b.st.DisableWarmupForOAuthUpstreams(b.ctx)); n != 1 {
			t.Fatalf("disabled %d", n)
		}
	})
	rev("mass disable (P-WARM-R3)", must(b.st.GetUpstream(b.ctx, o.ID)).SpecRevision, o.SpecRevision+1)
	step("mass disable with nothing left", 0, func() {
		if n := must(b.st.DisableWarmupForOAuthUpstreams(b.ctx)); n != 0 {
			t.Fatalf("disabled %d", n)
		}
	})
	step("failed mutations", 0, func() {
		_, err := b.st.PatchUpstream(b.ctx, u.ID, 1, store.UpstreamPatch{Name: &name})
		wantErr(t, err, store.ErrStaleRevision)
		_, err = b.st.CreateUpstream(b.ctx, apiKeySpec("g3"))
		wantErr(t, err, store.ErrConflict)
		_, err = b.st.UpdateUpstream(b.ctx, "up_missing", store.AnyRevision, apiKeySpec("x"))
		wantErr(t, err, store.ErrNotFound)
		wantErr(t, b.st.DeleteUpstream(b.ctx, u.ID, 1), store.ErrStaleRevision)
	})
	rev("failed mutations", must(b.st.GetUpstream(b.ctx, u.ID)).SpecRevision, 4)

	var p *store.Principal
	step("create principal", 1, func() { p = must(b.st.CreatePrincipal(b.ctx, principal("gp"))) })
	rev("create principal", p.Revision, 1)
	step("update principal", 1, func() { p = must(b.st.UpdatePrincipal(b.ctx, p.ID, 1, principal("gp2"))) })
	rev("update principal", p.Revision, 2)
	off := false
	step("patch principal", 1, func() { p = must(b.st.PatchPrincipal(b.ctx, p.ID, 2, store.PrincipalPatch{Enabled: &off})) })
	rev("patch principal", p.Revision, 3)
	step("failed principal mutations", 0, func() {
		_, err := b.st.PatchPrincipal(b.ctx, p.ID, 2, store.PrincipalPatch{Enabled: &off})
		wantErr(t, err, store.ErrStaleRevision)
		_, err = b.st.CreatePrincipal(b.ctx, principal("gp2"))
		wantErr(t, err, store.ErrConflict)
		wantErr(t, b.st.DeletePrincipal(b.ctx, p.ID, 1), store.ErrStaleRevision)
	})
	var k *store.Key
	step("issue key", 1, func() { k = must(b.st.CreateKey(b.ctx, store.Key{PrincipalID: p.ID, Prefix: "x", Hash: hash("g")})) })
	step("revoke key", 1, func() { must(b.st.RevokeKey(b.ctx, p.ID, k.ID)) })
	step("revoke again", 0, func() { must(b.st.RevokeKey(b.ctx, p.ID, k.ID)) })
	entry := must(b.st.ListChain(b.ctx, p.ID))[0]
	var e *store.ChainEntry
	step("update chain entry", 1, func() {
		e = must(b.st.UpdateChainEntry(b.ctx, entry.ID, entry.Revision, json.RawMessage(fmt.Sprintf(`{"upstream_id":%q}`, u.ID)), true))
	})
	rev("update chain entry", e.Revision, entry.Revision+1)
	step("refused delete", 0, func() { wantErr(t, b.st.DeleteUpstream(b.ctx, u.ID, store.AnyRevision), store.ErrReferenced) })

	step("request events and maintenance", 0, func() {
		now := b.clk.Now()
		if err := b.st.InsertRequestEvents(b.ctx, []store.RequestEvent{{At: now, PrincipalID: p.ID, UpstreamID: u.ID, Model: "m", Status: 200}}); err != nil {
			t.Fatal(err)
		}
		must(b.st.RollupUsage(b.ctx, now, now.Add(time.Hour)))
		if err := b.st.SetUpstreamModels(b.ctx, u.ID, []store.UpstreamModel{{ModelID: "m", RefreshedAt: now}}); err != nil {
			t.Fatal(err)
		}
		must(b.st.PutPriceCatalog(b.ctx, store.PriceCatalog{Version: "v", Body: json.RawMessage(`{}`), FetchedAt: now}))
		must(b.st.Prune(b.ctx, "request_events", now.Add(-time.Hour)))
		must(b.st.LoadConfig(b.ctx))
	})
	step("delete principal", 1, func() {
		if err := b.st.DeletePrincipal(b.ctx, p.ID, p.Revision); err != nil {
			t.Fatal(err)
		}
	})
	step("delete upstream", 1, func() {
		if err := b.st.DeleteUpstream(b.ctx, u.ID, u.SpecRevision); err != nil {
			t.Fatal(err)
		}
	})
}

// race runs fn from n goroutines at once and counts successes and stale
// revisions; any other error fails the test.
func race(t *testing.T, n int, fn func(i int) error) (ok, stale int64) {
	t.Helper()
	var okN, staleN atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			switch err := fn(i); {
			case err == nil:
				okN.Add(1)
			case errors.Is(err, store.ErrStaleRevision), errors.Is(err, store.ErrConflict):
				staleN.Add(1)
			default:
				t.Errorf("writer %d: %v", i, err)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	return okN.Load(), staleN.Load()
}

// P-API-2, P-PR-7: principals and chain entries under concurrent writers:
// one name wins, one writer per expected revision wins, nothing is lost.
func testPrincipalConcurrency(t *testing.T, open Opener) {
	b := setup(t, open)
	const writers = 10
	var winner atomic.Value
	ok, lost := race(t, writers, func(int) error {
		p, err := b.st.CreatePrincipal(b.ctx, principal("same"))
		if err == nil {
			winner.Store(p)
		} else if !errors.Is(err, store.ErrConflict) {
			return fmt.Errorf("want conflict: %w", err)
		}
		return err
	})
	if ok != 1 || lost != writers-1 {
		t.Fatalf("same-name creates: %d ok, %d conflicts", ok, lost)
	}
	p := winner.Load().(*store.Principal)
	if n := len(must(b.st.ListPrincipals(b.ctx))); n != 1 {
		t.Fatalf("%d principals", n)
	}
	if n := len(must(b.st.ListChain(b.ctx, p.ID))); n != 1 {
		t.Fatalf("the winner has %d chain entries", n)
	}
	ok, stale := race(t, writers, func(i int) error {
		models := []string{fmt.Sprintf("m%d", i)}
		_, err := b.st.PatchPrincipal(b.ctx, p.ID, p.Revision, store.PrincipalPatch{AllowedModels: &models})
		return err
	})
	if ok != 1 || stale != writers-1 {
		t.Fatalf("principal patches: %d ok, %d stale", ok, stale)
	}
	e := must(b.st.ListChain(b.ctx, p.ID))[0]
	ok, stale = race(t, writers, func(i int) error {
		_, err := b.st.UpdateChainEntry(b.ctx, e.ID, e.Revision, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), true)
		return err
	})
	if ok != 1 || stale != writers-1 {
		t.Fatalf("chain updates: %d ok, %d stale", ok, stale)
	}
	ok, _ = race(t, writers, func(i int) error {
		_, err := b.st.UpdateChainEntry(b.ctx, e.ID, store.AnyRevision, json.RawMessage(`{}`), true)
		return err
	})
	if got := must(b.st.ListChain(b.ctx, p.ID))[0]; ok != writers || got.Revision != e.Revision+1+writers {
		t.Fatalf("unconditional chain updates lost: revision %d", got.Revision)
	}
	// Keys issued concurrently to one principal all land.
	ok, _ = race(t, writers, func(i int) error {
		_, err := b.st.CreateKey(b.ctx, store.Key{PrincipalID: p.ID, Prefix: "x", Hash: hash(fmt.Sprint(i))})
		return err
	})
	if n := len(must(b.st.ListKeys(b.ctx, p.ID))); ok != writers || n != writers {
		t.Fatalf("%d keys issued, %d listed", ok, n)
	}
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

// LoadConfig and the lists return rows in their documented order.
func testOrdering(t *testing.T, open Opener) {
	b := setup(t, open)
	for _, id := range []string{"up_b", "up_a"} {
		s := apiKeySpec(id)
		s.ID = id
		must(b.st.CreateUpstream(b.ctx, s))
	}
	b.clk.Advance(time.Second)
	s := apiKeySpec("later")
	s.ID = "up_0"
	must(b.st.CreateUpstream(b.ctx, s))
	cfg := must(b.st.LoadConfig(b.ctx))
	var ids []string
	for _, u := range cfg.Upstreams {
		ids = append(ids, u.ID)
	}
	if fmt.Sprint(ids) != "[up_a up_b up_0]" {
		t.Fatalf("upstream order %v: want created time, then id", ids)
	}
	if l := must(b.st.ListUpstreams(b.ctx)); l[0].ID != "up_a" || l[2].ID != "up_0" {
		t.Fatal("ListUpstreams order differs from LoadConfig")
	}
	for _, id := range []string{"pr_b", "pr_a"} {
		p := principal(id)
		p.ID = id
		must(b.st.CreatePrincipal(b.ctx, p))
	}
	cfg = must(b.st.LoadConfig(b.ctx))
	if len(cfg.Chains) != 2 || cfg.Chains[0].PrincipalID != "pr_a" || cfg.Chains[1].PrincipalID != "pr_b" {
		t.Fatalf("chains %+v: want ordered by principal", cfg.Chains)
	}
}

// A closed or unreachable database reports ErrUnavailable, which the admin
// API renders as storage_unavailable.
func testUnavailable(t *testing.T, open Opener) {
	b := setup(t, open)
	u := must(b.st.CreateUpstream(b.ctx, apiKeySpec("u")))
	b.st.Close()
	wantErr(t, b.st.Ping(b.ctx), store.ErrUnavailable)
	_, err := b.st.GetUpstream(b.ctx, u.ID)
	wantErr(t, err, store.ErrUnavailable)
	_, err = b.st.LoadConfig(b.ctx)
	wantErr(t, err, store.ErrUnavailable)
	_, err = b.st.CreatePrincipal(b.ctx, principal("p"))
	wantErr(t, err, store.ErrUnavailable)
}
