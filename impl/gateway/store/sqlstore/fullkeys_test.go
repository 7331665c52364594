package sqlstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
)

// A full configuration read returns every live key with its principal and
// hash, whichever way the dialect reads them (SQLite: joined rows in two
// halves, falling back to rows when an id holds the joining separator;
// PostgreSQL: pgx's raw values, in binary or, in simple protocol mode,
// text form), and no revoked key.
func TestLoadConfigKeys(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres", "postgres-simple-protocol"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var st *sqlstore.Store
			var err error
			switch driver {
			case "sqlite":
				st, err = sqlite.Open(ctx, filepath.Join(t.TempDir(), "proxy.db"), sqlite.Options{})
			case "postgres":
				st, err = postgres.Open(ctx, pgtest.Schema(t), postgres.Options{})
			default:
				u := pgtest.Schema(t)
				sep := "?"
				if strings.Contains(u, "?") {
					sep = "&"
				}
				st, err = postgres.Open(ctx, u+sep+"default_query_exec_mode=simple_protocol", postgres.Options{})
			}
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			want := map[string]store.Key{}
			var prs []string
			for i := range 3 {
				p, err := st.CreatePrincipal(ctx, store.Principal{Name: fmt.Sprint("p", i), Kind: "human", Enabled: true})
				if err != nil {
					t.Fatal(err)
				}
				prs = append(prs, p.ID)
			}
			issue := func(id string, i int) *store.Key {
				h := sha256.Sum256([]byte(fmt.Sprint("key ", i)))
				k, err := st.CreateKey(ctx, store.Key{ID: id, PrincipalID: prs[i%len(prs)], Prefix: "sk", Hash: h[:]})
				if err != nil {
					t.Fatal(err)
				}
				want[k.ID] = *k
				return k
			}
			for i := range 60 {
				k := issue("", i)
				if i%7 == 3 {
					if _, err := st.RevokeKey(ctx, k.PrincipalID, k.ID); err != nil {
						t.Fatal(err)
					}
					delete(want, k.ID)
				}
			}
			check := func() {
				t.Helper()
				cfg, err := st.LoadConfig(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(cfg.Keys) != len(want) {
					t.Fatalf("%d keys read, want %d", len(cfg.Keys), len(want))
				}
				for _, k := range cfg.Keys {
					w, ok := want[k.ID]
					if !ok || k.PrincipalID != w.PrincipalID || !bytes.Equal(k.Hash, w.Hash) {
						t.Fatalf("read key %q of %q hash %x; want %+v (found %v)", k.ID, k.PrincipalID, k.Hash, w, ok)
					}
				}
			}
			check()
			// Hashes of the wrong length (the store takes any) are read
			// as stored and shift no other key's: a 31-byte and a 33-byte
			// one add up to two keys' worth around a good key.
			bad := func(id string, n int) {
				k, err := st.CreateKey(ctx, store.Key{ID: id, PrincipalID: prs[0], Prefix: "sk", Hash: bytes.Repeat([]byte{0xab}, n)})
				if err != nil {
					t.Fatal(err)
				}
				want[k.ID] = *k
			}
			bad("key_short", 31)
			issue("key_between", 101)
			bad("key_long", 33)
			check()
			// Ids are the store's own, or given; one holding the unit
			// separator SQLite joins ids with still reads back whole.
			issue("key_given\x1fwith a separator", 100)
			check()
			// More keys than share one string of ids on PostgreSQL,
			// written in one transaction.
			tx, err := st.DB().BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			q, at := "INSERT INTO principal_keys (id, principal_id, name, prefix, hash, created_at) VALUES (?, ?, '', 'sk', ?, ?)", any(int64(0))
			if driver != "sqlite" {
				q, at = "INSERT INTO principal_keys (id, principal_id, name, prefix, hash, created_at) VALUES ($1, $2, '', 'sk', $3, $4)", time.Now()
			}
			for i := range 2500 {
				h := sha256.Sum256([]byte(fmt.Sprint("bulk ", i)))
				k := store.Key{ID: fmt.Sprint("key_bulk_", i, strings.Repeat("x", i%7)), PrincipalID: prs[i%len(prs)], Hash: h[:]}
				if _, err := tx.ExecContext(ctx, q, k.ID, k.PrincipalID, k.Hash, at); err != nil {
					t.Fatal(err)
				}
				want[k.ID] = k
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			check()
		})
	}
}

// On PostgreSQL a full read's principals and chain entries come through
// pgx's own rows, their times decoded by pgx into the rows' fields: they
// equal, times and their location included, what a get through
// database/sql returns, in both protocol modes.
func TestLoadConfigRawRowsAreThePlainRows(t *testing.T) {
	for _, mode := range []string{"", "default_query_exec_mode=simple_protocol"} {
		t.Run("postgres"+mode, func(t *testing.T) {
			ctx := context.Background()
			u := pgtest.Schema(t)
			if mode != "" {
				sep := "?"
				if strings.Contains(u, "?") {
					sep = "&"
				}
				u += sep + mode
			}
			st, err := postgres.Open(ctx, u, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for i := range 3 {
				p := store.Principal{Name: fmt.Sprint("p", i), Kind: "human", Enabled: i != 1}
				if i == 2 {
					p.AllowedModels = []string{"a", "b"}
					p.CacheKeepalive = []byte(`{"enabled":true}`)
				}
				if _, err := st.CreatePrincipal(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			used := sqlstore.BesideUsed()
			cfg, err := st.LoadConfig(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if sqlstore.BesideUsed() == used {
				t.Fatal("no read beside: the raw rows were not read")
			}
			for _, p := range cfg.Principals {
				want, err := st.GetPrincipal(ctx, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(p, *want) {
					t.Fatalf("read %+v, get %+v", p, *want)
				}
				chain, err := st.ListChain(ctx, p.ID)
				if err != nil {
					t.Fatal(err)
				}
				var got []store.ChainEntry
				for _, e := range cfg.Chains {
					if e.PrincipalID == p.ID {
						got = append(got, e)
					}
				}
				if len(got) == 0 || !reflect.DeepEqual(got, chain) {
					t.Fatalf("read chain %+v, list %+v", got, chain)
				}
			}
		})
	}
}
