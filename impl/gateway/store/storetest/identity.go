package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseIdentity(t *testing.T, open Opener) {
	t.Run("AdminTokens", func(t *testing.T) { run(t, open, testAdminTokens) })
	t.Run("AuditTrail", func(t *testing.T) { run(t, open, testAuditTrail) })
}

// Scoped admin tokens keep only their hash; a duplicate hash is a
// conflict; revocation is idempotent and audited once; no token change
// moves the configuration generation.
func testAdminTokens(t *testing.T, open Opener) {
	b := setup(t, open)
	ctx := store.WithActorInfo(b.ctx, store.Actor{Kind: "break_glass", Subject: "break-glass", Remote: "127.0.0.1:1"})
	gen := must(b.st.ConfigGeneration(b.ctx))
	exp := b.clk.Now().Add(24 * time.Hour)
	tk := must(b.st.CreateAdminToken(ctx, store.AdminToken{Name: "ci", Role: "operator", Prefix: "pat-abcd", Hash: hash("tok"), ExpiresAt: exp, CreatedBy: "break-glass"}))
	if tk.ID == "" || tk.RevokedAt != nil || !tk.CreatedAt.Equal(b.clk.Now()) {
		t.Fatalf("token %+v", tk)
	}
	_, err := b.st.CreateAdminToken(ctx, store.AdminToken{Name: "dup", Role: "viewer", Prefix: "x", Hash: hash("tok"), ExpiresAt: exp})
	wantErr(t, err, store.ErrConflict)
	got := must(b.st.AdminTokenByHash(b.ctx, hash("tok")))
	if got.ID != tk.ID || got.Role != "operator" || got.Name != "ci" || !got.ExpiresAt.Equal(exp) || got.CreatedBy != "break-glass" {
		t.Fatalf("by hash %+v", got)
	}
	_, err = b.st.AdminTokenByHash(b.ctx, hash("other"))
	wantErr(t, err, store.ErrNotFound)
	b.clk.Advance(time.Second)
	r := must(b.st.RevokeAdminToken(ctx, tk.ID))
	if r.RevokedAt == nil || !r.RevokedAt.Equal(b.clk.Now()) {
		t.Fatalf("revoked %+v", r)
	}
	b.clk.Advance(time.Second)
	r2 := must(b.st.RevokeAdminToken(ctx, tk.ID))
	if !r2.RevokedAt.Equal(*r.RevokedAt) {
		t.Fatal("second revoke moved revoked_at")
	}
	_, err = b.st.RevokeAdminToken(ctx, "tok_missing")
	wantErr(t, err, store.ErrNotFound)
	if ts := must(b.st.ListAdminTokens(b.ctx)); len(ts) != 1 || ts[0].RevokedAt == nil {
		t.Fatalf("list %+v", ts)
	}
	if must(b.st.ConfigGeneration(b.ctx)) != gen {
		t.Fatal("a token change moved the configuration generation")
	}
	es := must(b.st.QueryAudit(b.ctx, store.AuditQuery{ResourceKind: "admin_token"}))
	if len(es) != 2 || es[0].Action != "revoke" || es[1].Action != "create" || es[0].ActorKind != "break_glass" || es[0].Remote != "127.0.0.1:1" {
		t.Fatalf("audit %+v", es)
	}
}

// The audit trail names the full actor, filters by each field, pages by
// cursor without gaps or repeats, and carries the annotated documents.
func testAuditTrail(t *testing.T, open Opener) {
	b := setup(t, open)
	var note store.AuditNote
	alice := store.WithAuditNote(store.WithActorInfo(b.ctx, store.Actor{Kind: "oidc", Subject: "alice", Issuer: "https://idp.example", Remote: "10.0.0.1:5"}), &note)
	bot := store.WithActorInfo(b.ctx, store.Actor{Kind: "token", Subject: "token:ci", TokenName: "ci"})
	u := must(b.st.CreateUpstream(alice, apiKeySpec("a")))
	ids := note.IDs()
	if len(ids) != 1 {
		t.Fatalf("noted %v", ids)
	}
	must(0, b.st.AnnotateAudit(b.ctx, ids, nil, json.RawMessage(`{"name":"a"}`)))
	var ps []string
	for i := range 5 {
		b.clk.Advance(time.Second)
		ps = append(ps, must(b.st.CreatePrincipal(bot, principal("p"+string(rune('0'+i))))).ID)
	}
	es := must(b.st.QueryAudit(b.ctx, store.AuditQuery{Actor: "alice"}))
	if len(es) != 1 {
		t.Fatalf("by actor %+v", es)
	}
	e := es[0]
	if e.ActorKind != "oidc" || e.Issuer != "https://idp.example" || e.Remote != "10.0.0.1:5" || e.ResourceID != u.ID ||
		e.Before != nil || string(e.After) != `{"name":"a"}` || e.Revision == nil || *e.Revision != 1 {
		t.Fatalf("entry %+v", e)
	}
	if es := must(b.st.QueryAudit(b.ctx, store.AuditQuery{ActorKind: "token", ResourceKind: "principal", Action: "create"})); len(es) != 5 || es[0].TokenName != "ci" {
		t.Fatalf("by kind %+v", es)
	}
	if es := must(b.st.QueryAudit(b.ctx, store.AuditQuery{ResourceID: ps[2]})); len(es) != 1 {
		t.Fatalf("by resource %+v", es)
	}
	start := must(b.st.QueryAudit(b.ctx, store.AuditQuery{Limit: 100}))
	if es := must(b.st.QueryAudit(b.ctx, store.AuditQuery{Since: start[2].At, Until: start[0].At})); len(es) != 2 {
		t.Fatalf("time window %+v", es)
	}
	var seen []string
	q := store.AuditQuery{Limit: 2}
	for range 10 {
		page := must(b.st.QueryAudit(b.ctx, q))
		for _, e := range page {
			seen = append(seen, e.ID)
		}
		if len(page) < q.Limit {
			break
		}
		last := page[len(page)-1]
		q.After = &store.AuditCursor{At: last.At, ID: last.ID}
	}
	if len(seen) != 6 {
		t.Fatalf("paged %d entries, want 6: %v", len(seen), seen)
	}
	for i := range seen {
		if seen[i] != start[i].ID {
			t.Fatalf("page order differs at %d: %v vs %+v", i, seen, start)
		}
	}
}
