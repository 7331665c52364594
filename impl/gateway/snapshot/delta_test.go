package snapshot_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

// replicas opens two stores on one database: a writes (the replica
// serving the admin call), b's runtime follows (another replica).
type replicas struct {
	a, b store.Store
	box  *secret.Box
	clk  *fakeclock.Clock
	rt   *snapshot.Runtime
}

func openReplicas(t *testing.T, driver string) *replicas {
	t.Helper()
	ctx := context.Background()
	r := &replicas{clk: fakeclock.New(time.Unix(1_800_000_000, 0))}
	var err error
	if r.box, err = secret.New(make([]byte, secret.KeySize)); err != nil {
		t.Fatal(err)
	}
	switch driver {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "gw.db")
		if r.a, err = sqlite.Open(ctx, path, sqlite.Options{Clock: r.clk}); err != nil {
			t.Fatal(err)
		}
		if r.b, err = sqlite.Open(ctx, path, sqlite.Options{Clock: r.clk}); err != nil {
			t.Fatal(err)
		}
	case "postgres":
		u := pgtest.Schema(t)
		if r.a, err = postgres.Open(ctx, u, postgres.Options{Clock: r.clk}); err != nil {
			t.Fatal(err)
		}
		if r.b, err = postgres.Open(ctx, u, postgres.Options{Clock: r.clk}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { r.a.Close(); r.b.Close() })
	r.rt = snapshot.NewRuntime(r.b, r.box, service.Options{Clock: r.clk})
	return r
}

func (r *replicas) upstream(t *testing.T, name string) *store.Upstream {
	t.Helper()
	id := store.NewID("up")
	ct, err := r.box.Seal([]byte("sk-"+name), credential.AD(id, store.KindVendorAPIKey, "https://api.example", ""))
	if err != nil {
		t.Fatal(err)
	}
	u, err := r.a.CreateUpstream(context.Background(), store.UpstreamSpec{ID: id, Name: name, Kind: store.KindVendorAPIKey,
		BaseURL: "https://api.example", Enabled: true, Credential: ct, CredentialKind: credential.APIKey})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// refreshDelta refreshes b's runtime and fails unless the rebuild applied
// a delta (no full read).
func (r *replicas) refreshDelta(t *testing.T) {
	t.Helper()
	d0, f0 := r.rt.Rebuilds()
	changed, err := r.rt.RefreshIfChanged(context.Background())
	if err != nil || !changed {
		t.Fatalf("refresh: changed=%v err=%v", changed, err)
	}
	if d, f := r.rt.Rebuilds(); d != d0+1 || f != f0 {
		t.Fatalf("rebuilds delta %d→%d, full %d→%d: want one delta", d0, d, f0, f)
	}
}

func keyHash(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) }

func bothDrivers(t *testing.T, fn func(t *testing.T, driver string)) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			if driver == "postgres" {
				pgtest.URL(t)
			}
			t.Parallel()
			fn(t, driver)
		})
	}
}

// A key revoked through one replica stops authenticating on another once
// it applies the delta; a reader still holding the older snapshot keeps
// its consistent view, and the other keys stay.
func TestDeltaRevocationOnReplica(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		r := openReplicas(t, driver)
		r.upstream(t, "u1")
		p, err := r.a.CreatePrincipal(ctx, store.Principal{Name: "p", Kind: "machine", Enabled: true, AllowedModels: []string{"*"}})
		if err != nil {
			t.Fatal(err)
		}
		k1, _ := r.a.CreateKey(ctx, store.Key{PrincipalID: p.ID, Prefix: "a", Hash: sliceOf(keyHash("k1"))})
		if _, err := r.a.CreateKey(ctx, store.Key{PrincipalID: p.ID, Prefix: "b", Hash: sliceOf(keyHash("k2"))}); err != nil {
			t.Fatal(err)
		}
		if err := r.rt.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		old := r.rt.Current()
		if old.KeyByHash(keyHash("k1")) == nil {
			t.Fatal("k1 not loaded")
		}
		if _, err := r.a.RevokeKey(ctx, p.ID, k1.ID); err != nil {
			t.Fatal(err)
		}
		r.refreshDelta(t)
		cur := r.rt.Current()
		if cur.KeyByHash(keyHash("k1")) != nil {
			t.Fatal("revoked key still authenticates after the delta")
		}
		if k := cur.KeyByHash(keyHash("k2")); k == nil || k.Principal != cur.Principal(p.ID) {
			t.Fatal("the principal's other key lost")
		}
		if old.KeyByHash(keyHash("k1")) == nil {
			t.Fatal("the snapshot a reader held was changed")
		}
	})
}

// A principal deleted through one replica loses its keys and its entry on
// another through the delta.
func TestDeltaPrincipalDeletionOnReplica(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		r := openReplicas(t, driver)
		r.upstream(t, "u1")
		p, _ := r.a.CreatePrincipal(ctx, store.Principal{Name: "p", Kind: "machine", Enabled: true})
		q, _ := r.a.CreatePrincipal(ctx, store.Principal{Name: "q", Kind: "machine", Enabled: true})
		for _, k := range []struct{ owner, key string }{{p.ID, "p1"}, {p.ID, "p2"}, {q.ID, "q1"}} {
			if _, err := r.a.CreateKey(ctx, store.Key{PrincipalID: k.owner, Prefix: k.key, Hash: sliceOf(keyHash(k.key))}); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.rt.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if err := r.a.DeletePrincipal(ctx, p.ID, store.AnyRevision); err != nil {
			t.Fatal(err)
		}
		r.refreshDelta(t)
		cur := r.rt.Current()
		if cur.Principal(p.ID) != nil || cur.KeyByHash(keyHash("p1")) != nil || cur.KeyByHash(keyHash("p2")) != nil {
			t.Fatal("deleted principal or its keys still in the snapshot")
		}
		if cur.KeyByHash(keyHash("q1")) == nil {
			t.Fatal("another principal's key lost")
		}
		// A principal disabled, limits changed: its key now points at the
		// new principal.
		lim := json.RawMessage(`[{"kind":"requests","window_secs":60,"max":3}]`)
		if _, err := r.a.PatchPrincipal(ctx, q.ID, store.AnyRevision, store.PrincipalPatch{Enabled: ptr(false), DefaultLimits: &lim}); err != nil {
			t.Fatal(err)
		}
		r.refreshDelta(t)
		k := r.rt.Current().KeyByHash(keyHash("q1"))
		if k == nil || k.Principal.Enabled || len(k.Principal.Limits) != 1 {
			t.Fatalf("patched principal not applied through its key: %+v", k.Principal)
		}
	})
}

// An upstream disabled through one replica leaves every principal's
// candidates on another (the delta builds the snapshot from the applied
// configuration without reading it all).
func TestDeltaUpstreamChangeOnReplica(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		r := openReplicas(t, driver)
		u1, u2 := r.upstream(t, "u1"), r.upstream(t, "u2")
		p, _ := r.a.CreatePrincipal(ctx, store.Principal{Name: "p", Kind: "machine", Enabled: true})
		if err := r.rt.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if c := r.rt.Current().Principal(p.ID).Candidates; len(c) != 2 {
			t.Fatalf("candidates %d", len(c))
		}
		if _, err := r.a.PatchUpstream(ctx, u1.ID, store.AnyRevision, store.UpstreamPatch{Enabled: ptr(false)}); err != nil {
			t.Fatal(err)
		}
		r.refreshDelta(t)
		c := r.rt.Current().Principal(p.ID).Candidates
		if len(c) != 1 || c[0].ID != u2.ID {
			t.Fatalf("candidates after disabling %s: %v", u1.ID, c)
		}
	})
}

// The delta is not trusted past what the change log shows: a change an
// older version wrote (no log row) is read in full; so is the first
// refresh, and every FullEvery.
func TestDeltaFallsBackToFull(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		r := openReplicas(t, driver)
		r.rt.FullEvery = time.Hour
		p, _ := r.a.CreatePrincipal(ctx, store.Principal{Name: "p", Kind: "machine", Enabled: true})
		if _, err := r.a.CreateKey(ctx, store.Key{PrincipalID: p.ID, Prefix: "a", Hash: sliceOf(keyHash("k"))}); err != nil {
			t.Fatal(err)
		}
		want := func(delta, full uint64) {
			t.Helper()
			if d, f := r.rt.Rebuilds(); d != delta || f != full {
				t.Fatalf("rebuilds: %d delta, %d full; want %d, %d", d, f, delta, full)
			}
		}
		if err := r.rt.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		want(0, 1)
		// An older writer: revokes by hand and bumps the generation only.
		db := r.a.(interface{ DB() *sql.DB }).DB()
		if _, err := db.ExecContext(ctx, "UPDATE principal_keys SET revoked_at = created_at"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "UPDATE config_generation SET generation = generation + 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := r.rt.RefreshIfChanged(ctx); err != nil {
			t.Fatal(err)
		}
		want(0, 2)
		if r.rt.Current().KeyByHash(keyHash("k")) != nil {
			t.Fatal("a revocation by an older writer was missed")
		}
		// Past the gap, deltas again.
		if _, err := r.a.PatchPrincipal(ctx, p.ID, store.AnyRevision, store.PrincipalPatch{Name: ptr("p2")}); err != nil {
			t.Fatal(err)
		}
		r.refreshDelta(t)
		want(1, 2)
		// The bounded interval: past it, a change is read in full.
		r.clk.Advance(time.Hour)
		if _, err := r.a.PatchPrincipal(ctx, p.ID, store.AnyRevision, store.PrincipalPatch{Name: ptr("p3")}); err != nil {
			t.Fatal(err)
		}
		if err := r.rt.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		want(1, 3)
		if r.rt.Current().Principal(p.ID).Name != "p3" {
			t.Fatal("change not applied")
		}
	})
}

// A generation that went backwards (a database restored from a backup)
// leaves no base a delta may trust: once the store moves past the
// snapshot again, the change is read in full, not applied to a history
// that diverged.
func TestDeltaAfterGenerationWentBack(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		r := openReplicas(t, driver)
		r.rt.FullEvery = time.Hour
		p, _ := r.a.CreatePrincipal(ctx, store.Principal{Name: "p", Kind: "machine", Enabled: true})
		if err := r.rt.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		gen := r.rt.Current().Generation
		db := r.a.(interface{ DB() *sql.DB }).DB()
		if _, err := db.ExecContext(ctx, "UPDATE config_generation SET generation = generation - 1 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if err := r.rt.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if d, f := r.rt.Rebuilds(); d != 0 || f != 2 || r.rt.Current().Generation != gen {
			t.Fatalf("after the generation went back: %d delta, %d full, generation %d", d, f, r.rt.Current().Generation)
		}
		for _, name := range []string{"a", "b"} {
			if _, err := r.a.PatchPrincipal(ctx, p.ID, store.AnyRevision, store.PrincipalPatch{Name: ptr(name)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.rt.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if d, f := r.rt.Rebuilds(); d != 0 || f != 3 || r.rt.Current().Principal(p.ID).Name != "b" {
			t.Fatalf("past the old generation: %d delta, %d full", d, f)
		}
	})
}

// The reconciler keeps its cheap generation poll and, once FullEvery has
// passed since the last full read, reads in full though nothing changed.
func TestReconcileForcesFullRebuild(t *testing.T) {
	r := openReplicas(t, "sqlite")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := r.rt.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.rt.Reconcile(ctx, snapshot.FullRebuildEvery); close(done) }()
	defer func() { cancel(); <-done }()
	<-r.clk.Armed()
	r.clk.Advance(snapshot.FullRebuildEvery)
	waitfor.Until(t, "a full rebuild after FullRebuildEvery", func() error {
		if _, f := r.rt.Rebuilds(); f != 2 {
			return fmt.Errorf("%d full rebuilds", f)
		}
		return nil
	})
}

func sliceOf(h [sha256.Size]byte) []byte { return h[:] }

func ptr[T any](v T) *T { return &v }
