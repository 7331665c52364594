package sqlstore_test

import (
	"context"
	"crypto/sha256"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
)

// A full configuration read that reads the
// keys and the chain entries in transactions of their own still returns
// one state. A key is issued (its own transaction, committed) after the
// first transaction read the generation and before the others begin: the
// keys returned are those of the generation returned, on PostgreSQL
// because the others import the first's snapshot, on SQLite because they
// see another generation and their reads are done again in the first.
func TestLoadConfigKeysBesideIsOneState(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			ctx := context.Background()
			var st *sqlstore.Store
			var err error
			if driver == "sqlite" {
				st, err = sqlite.Open(ctx, filepath.Join(t.TempDir(), "proxy.db"), sqlite.Options{})
			} else {
				st, err = postgres.Open(ctx, pgtest.Schema(t), postgres.Options{})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			p, err := st.CreatePrincipal(ctx, store.Principal{Name: "p", Kind: "human", Enabled: true})
			if err != nil {
				t.Fatal(err)
			}
			issue := func(s string) {
				h := sha256.Sum256([]byte(s))
				if _, err := st.CreateKey(ctx, store.Key{PrincipalID: p.ID, Prefix: s, Hash: h[:]}); err != nil {
					t.Error(err)
				}
			}
			issue("first")
			used := sqlstore.BesideUsed()
			var hooked atomic.Int32
			var once sync.Once
			defer sqlstore.SetBesideHook(func() {
				hooked.Add(1)
				once.Do(func() { issue("between") })
			})()
			cfg, err := st.LoadConfig(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// SQLite reads its keys in two halves (by rowid), PostgreSQL
			// its principals beside too.
			beside := int64(3)
			if n := hooked.Load(); int64(n) != beside {
				t.Fatalf("%d transactions beside, want %d (keys, chain entries)", n, beside)
			}
			gen, err := st.ConfigGeneration(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Keys) != 1 || cfg.Generation != gen-1 {
				t.Fatalf("read generation %d with %d keys; the store is at %d with 2 keys", cfg.Generation, len(cfg.Keys), gen)
			}
			if len(cfg.Chains) != 1 {
				t.Fatalf("%d chain entries, want 1", len(cfg.Chains))
			}
			// PostgreSQL used the reads beside; SQLite refused them.
			if got, want := sqlstore.BesideUsed()-used, map[string]int64{"sqlite": 0, "postgres": 3}[driver]; got != want {
				t.Fatalf("%d reads beside used, want %d", got, want)
			}
			sqlstore.SetBesideHook(nil)
			used = sqlstore.BesideUsed()
			cfg, err = st.LoadConfig(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Keys) != 2 || cfg.Generation != gen {
				t.Fatalf("read generation %d with %d keys, want %d with 2", cfg.Generation, len(cfg.Keys), gen)
			}
			if n := sqlstore.BesideUsed() - used; n != beside {
				t.Fatalf("an undisturbed read used %d reads beside, want %d", n, beside)
			}
		})
	}
}
