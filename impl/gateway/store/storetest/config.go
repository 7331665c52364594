package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseConfig(t *testing.T, open Opener) {
	t.Run("LoadConfig", func(t *testing.T) { run(t, open, testLoadConfig) })
	t.Run("LoadConfigSnapshot", func(t *testing.T) { run(t, open, testLoadConfigSnapshot) })
	t.Run("Generations", func(t *testing.T) { run(t, open, testGenerations) })
	t.Run("Ordering", func(t *testing.T) { run(t, open, testOrdering) })
	t.Run("Unavailable", func(t *testing.T) { run(t, open, testUnavailable) })
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
