package storetest

import (
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exercisePlugins(t *testing.T, open Opener) {
	t.Run("PluginRegistry", func(t *testing.T) { run(t, open, testPluginRegistry) })
	t.Run("PluginChains", func(t *testing.T) { run(t, open, testPluginChains) })
	t.Run("PluginCascadeRace", func(t *testing.T) { run(t, open, testPluginCascadeRace) })
}

func plugin(b *bundle, name string, slots ...string) *store.RegistryEntry {
	v := "1.0.0"
	return must(b.st.CreateRegistryEntry(b.ctx, store.RegistryEntry{Name: name, Version: &v, Digest: "d-" + name, Slots: slots}, []byte("\x00asm-"+name)))
}

func testPluginRegistry(t *testing.T, open Opener) {
	b := setup(t, open)
	e := plugin(b, "router", store.SlotRouter, store.SlotWarmupDialect)
	if e.Revision != 1 || e.Refcount != 0 || len(e.Slots) != 2 || e.SizeBytes != 11 || *e.Version != "1.0.0" {
		t.Fatalf("entry %+v", e)
	}
	v := "1.0.0"
	_, err := b.st.CreateRegistryEntry(b.ctx, store.RegistryEntry{Name: "router", Version: &v, Digest: "x", Slots: []string{"router"}}, []byte("m"))
	wantErr(t, err, store.ErrConflict)
	if m := must(b.st.RegistryModule(b.ctx, e.ID)); string(m) != "\x00asm-router" {
		t.Fatalf("module %q", m)
	}
	name := "router-renamed"
	p := must(b.st.PatchRegistryEntry(b.ctx, e.ID, 1, &name, nil))
	if p.Name != name || p.Revision != 2 {
		t.Fatalf("patched %+v", p)
	}
	_, err = b.st.PatchRegistryEntry(b.ctx, e.ID, 1, &name, nil)
	wantErr(t, err, store.ErrStaleRevision)
	_, err = b.st.GetRegistryEntry(b.ctx, "wasm_nope")
	wantErr(t, err, store.ErrNotFound)

	// References: a chain binding and an upstream's warm-up dialect.
	pr := must(b.st.CreatePrincipal(b.ctx, principal("p")))
	entry := must(b.st.InsertChainEntry(b.ctx, pr.ID, store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: &e.ID}, nil))
	up := must(b.st.CreateUpstream(b.ctx, store.UpstreamSpec{Name: "o", Kind: store.KindVendorOAuth, BaseURL: "https://x.example"}))
	up = must(b.st.PatchUpstream(b.ctx, up.ID, store.AnyRevision, store.UpstreamPatch{SetWarmupDialect: true, WarmupDialectPlugin: &e.ID}))
	refs := must(b.st.RegistryReferences(b.ctx, e.ID))
	if len(refs) != 2 || must(b.st.GetRegistryEntry(b.ctx, e.ID)).Refcount != 2 {
		t.Fatalf("refs %+v", refs)
	}
	fp := store.ReferenceFingerprint(refs)
	_, err = b.st.DeleteRegistryEntry(b.ctx, e.ID, store.AnyRevision, false, "")
	var re *store.ReferencedError
	if !errors.As(err, &re) || len(re.References) != 2 {
		t.Fatalf("delete while referenced: %v", err)
	}
	_, err = b.st.DeleteRegistryEntry(b.ctx, e.ID, 1, true, fp)
	wantErr(t, err, store.ErrStaleRevision)
	_, err = b.st.DeleteRegistryEntry(b.ctx, e.ID, store.AnyRevision, true, "rf_stale")
	wantErr(t, err, store.ErrReferencesChanged)
	removed := must(b.st.DeleteRegistryEntry(b.ctx, e.ID, 2, true, fp))
	if len(removed) != 2 {
		t.Fatalf("removed %+v", removed)
	}
	_, err = b.st.GetChainEntry(b.ctx, entry.ID)
	wantErr(t, err, store.ErrNotFound)
	if u := must(b.st.GetUpstream(b.ctx, up.ID)); u.WarmupDialectPlugin != nil || u.SpecRevision != up.SpecRevision+1 {
		t.Fatalf("upstream after cascade %+v", u)
	}
	// Binding a dialect needs an entry with the slot.
	r2 := plugin(b, "only-router", store.SlotRouter)
	_, err = b.st.PatchUpstream(b.ctx, up.ID, store.AnyRevision, store.UpstreamPatch{SetWarmupDialect: true, WarmupDialectPlugin: &r2.ID})
	var se *store.SlotError
	if !errors.As(err, &se) || se.Unknown {
		t.Fatalf("dialect without the slot: %v", err)
	}
	// Unreferenced: a plain delete works.
	must(b.st.DeleteRegistryEntry(b.ctx, r2.ID, store.AnyRevision, false, ""))
}

func testPluginChains(t *testing.T, open Opener) {
	b := setup(t, open)
	pr := must(b.st.CreatePrincipal(b.ctx, principal("p")))
	builtin := must(b.st.ListChain(b.ctx, pr.ID))[0]
	a, c, d := plugin(b, "a", store.SlotRouter), plugin(b, "c", store.SlotRouter), plugin(b, "d", store.SlotWarmupDialect)
	ea := must(b.st.InsertChainEntry(b.ctx, pr.ID, store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: &a.ID, Config: []byte(`{"x":1}`)}, nil))
	if ea.Position != 1 || !sameJSON(ea.Config, `{"x":1}`) {
		t.Fatalf("appended %+v", ea)
	}
	_, err := b.st.InsertChainEntry(b.ctx, pr.ID, store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: &a.ID}, nil)
	wantErr(t, err, store.ErrConflict)
	var se *store.SlotError
	if _, err = b.st.InsertChainEntry(b.ctx, pr.ID, store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: &d.ID}, nil); !errors.As(err, &se) {
		t.Fatalf("wrong slot: %v", err)
	}
	missing := "wasm_missing"
	if _, err = b.st.InsertChainEntry(b.ctx, pr.ID, store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: &missing}, nil); !errors.As(err, &se) || !se.Unknown {
		t.Fatalf("unknown entry: %v", err)
	}
	_, err = b.st.InsertChainEntry(b.ctx, "pr_missing", store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: &a.ID}, nil)
	wantErr(t, err, store.ErrNotFound)
	zero := int64(0)
	ec := must(b.st.InsertChainEntry(b.ctx, pr.ID, store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: &c.ID}, &zero))
	chain := must(b.st.ListChain(b.ctx, pr.ID))
	if len(chain) != 3 || chain[0].ID != ec.ID || chain[1].ID != builtin.ID || chain[2].ID != ea.ID {
		t.Fatalf("insert at 0: %+v", chain)
	}
	// Reorder needs every entry at its current revision.
	refs := []store.ChainRef{{ID: ea.ID, Revision: chain[2].Revision}, {ID: builtin.ID, Revision: chain[1].Revision}, {ID: ec.ID, Revision: chain[0].Revision}}
	_, err = b.st.ReorderChain(b.ctx, pr.ID, store.SlotRouter, []store.ChainRef{refs[0], {ID: builtin.ID, Revision: 99}, refs[2]})
	wantErr(t, err, store.ErrStaleRevision)
	var oe *store.OrderError
	if _, err = b.st.ReorderChain(b.ctx, pr.ID, store.SlotRouter, refs[:2]); !errors.As(err, &oe) {
		t.Fatalf("partial order: %v", err)
	}
	chain = must(b.st.ReorderChain(b.ctx, pr.ID, store.SlotRouter, refs))
	if chain[0].ID != ea.ID || chain[2].ID != ec.ID || chain[0].Position != 0 || chain[2].Position != 2 {
		t.Fatalf("reordered %+v", chain)
	}
	chain = must(b.st.RebalanceChain(b.ctx, pr.ID))
	if chain[1].Position != 10 || chain[2].Position != 20 {
		t.Fatalf("rebalanced %+v", chain)
	}
	// The built-in entry can be removed; deletes check the revision.
	wantErr(t, b.st.DeleteChainEntry(b.ctx, builtin.ID, 1), store.ErrStaleRevision)
	must(0, b.st.DeleteChainEntry(b.ctx, builtin.ID, chain[1].Revision))
	wantErr(t, b.st.DeleteChainEntry(b.ctx, builtin.ID, store.AnyRevision), store.ErrNotFound)
	cfg := must(b.st.LoadConfig(b.ctx))
	if len(cfg.Chains) != 2 || len(cfg.Plugins) != 3 {
		t.Fatalf("config: %d chain entries, %d plugins", len(cfg.Chains), len(cfg.Plugins))
	}
}

// A cascade delete and a concurrent binding: either the binding lands
// first (and the stale fingerprint refuses the delete) or the delete does
// (and the binding fails): never a binding to a deleted entry.
func testPluginCascadeRace(t *testing.T, open Opener) {
	b := setup(t, open)
	for i := range 6 {
		e := plugin(b, "race-"+string(rune('a'+i)), store.SlotRouter)
		pr := must(b.st.CreatePrincipal(b.ctx, principal("race-"+string(rune('a'+i)))))
		fp := store.ReferenceFingerprint(must(b.st.RegistryReferences(b.ctx, e.ID)))
		var wg sync.WaitGroup
		var delErr, bindErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, delErr = b.st.DeleteRegistryEntry(b.ctx, e.ID, store.AnyRevision, true, fp)
		}()
		go func() {
			defer wg.Done()
			_, bindErr = b.st.InsertChainEntry(b.ctx, pr.ID, store.ChainEntry{Slot: store.SlotRouter, WasmRegistryID: &e.ID}, nil)
		}()
		wg.Wait()
		switch {
		case delErr == nil && bindErr == nil:
			if len(must(b.st.ListChain(b.ctx, pr.ID))) != 1 {
				t.Fatal("a binding to a deleted entry survived")
			}
		case delErr == nil:
			var se *store.SlotError
			if !errors.As(bindErr, &se) {
				t.Fatalf("binding after delete: %v", bindErr)
			}
		default:
			wantErr(t, delErr, store.ErrReferencesChanged)
		}
	}
}

func sameJSON(a []byte, b string) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal([]byte(b), &y) == nil && reflect.DeepEqual(x, y)
}
