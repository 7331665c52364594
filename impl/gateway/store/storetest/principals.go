package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exercisePrincipals(t *testing.T, open Opener) {
	t.Run("Principals", func(t *testing.T) { run(t, open, testPrincipals) })
	t.Run("PrincipalConcurrency", func(t *testing.T) { run(t, open, testPrincipalConcurrency) })
	t.Run("PrincipalMaxInFlight", func(t *testing.T) { run(t, open, testPrincipalMaxInFlight) })
	t.Run("PrincipalCaptureExchanges", func(t *testing.T) { run(t, open, testPrincipalCaptureExchanges) })
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

// A principal's cap on requests in flight: none unless given, replaced by
// an update, changed by a patch (the revision moves), read by the
// configuration load.
func testPrincipalMaxInFlight(t *testing.T, open Opener) {
	b := setup(t, open)
	p := must(b.st.CreatePrincipal(b.ctx, principal("plain")))
	if p.MaxInFlight != 0 {
		t.Fatalf("default cap %d", p.MaxInFlight)
	}
	spec := principal("capped")
	spec.MaxInFlight = 4
	if c := must(b.st.CreatePrincipal(b.ctx, spec)); c.MaxInFlight != 4 {
		t.Fatalf("created with cap %d", c.MaxInFlight)
	}
	spec = principal("plain")
	spec.MaxInFlight = 8
	up := must(b.st.UpdatePrincipal(b.ctx, p.ID, p.Revision, spec))
	if up.MaxInFlight != 8 {
		t.Fatalf("updated cap %d", up.MaxInFlight)
	}
	two := 2
	pp := must(b.st.PatchPrincipal(b.ctx, p.ID, up.Revision, store.PrincipalPatch{MaxInFlight: &two}))
	if pp.MaxInFlight != 2 || pp.Revision != up.Revision+1 {
		t.Fatalf("patched %+v", pp)
	}
	cfg := must(b.st.LoadConfig(b.ctx))
	found := false
	for _, c := range cfg.Principals {
		if c.ID == p.ID {
			found = c.MaxInFlight == 2
		}
	}
	if !found {
		t.Fatal("the configuration read lost the cap")
	}
}

// A principal's capture switch: off unless given, set by a create,
// cleared by an update that leaves it out, set by a patch and kept by a
// patch that does not name it, read by the configuration load (the
// request path's source).
func testPrincipalCaptureExchanges(t *testing.T, open Opener) {
	b := setup(t, open)
	if p := must(b.st.CreatePrincipal(b.ctx, principal("plain"))); p.CaptureExchanges {
		t.Fatal("capture on by default")
	}
	spec := principal("audited")
	spec.CaptureExchanges = true
	p := must(b.st.CreatePrincipal(b.ctx, spec))
	if !p.CaptureExchanges || !must(b.st.GetPrincipal(b.ctx, p.ID)).CaptureExchanges {
		t.Fatal("created with capture, read without")
	}
	up := must(b.st.UpdatePrincipal(b.ctx, p.ID, p.Revision, principal("audited")))
	if up.CaptureExchanges {
		t.Fatal("an update without capture kept it on")
	}
	on := true
	pp := must(b.st.PatchPrincipal(b.ctx, p.ID, up.Revision, store.PrincipalPatch{CaptureExchanges: &on}))
	if !pp.CaptureExchanges || pp.Revision != up.Revision+1 {
		t.Fatalf("patched %+v", pp)
	}
	name := "renamed"
	if kept := must(b.st.PatchPrincipal(b.ctx, p.ID, pp.Revision, store.PrincipalPatch{Name: &name})); !kept.CaptureExchanges {
		t.Fatal("a patch of another field turned capture off")
	}
	found := false
	for _, c := range must(b.st.LoadConfig(b.ctx)).Principals {
		if c.ID == p.ID {
			found = c.CaptureExchanges
		}
	}
	if !found {
		t.Fatal("the configuration read lost the capture switch")
	}
	for _, c := range must(b.st.ListPrincipals(b.ctx)) {
		if c.ID == p.ID && !c.CaptureExchanges {
			t.Fatal("the list lost the capture switch")
		}
	}
}
