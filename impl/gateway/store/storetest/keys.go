package storetest

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseKeys(t *testing.T, open Opener) {
	t.Run("Keys", func(t *testing.T) { run(t, open, testKeys) })
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
