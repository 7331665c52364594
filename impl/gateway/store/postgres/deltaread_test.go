package postgres_test

import (
	"context"
	"crypto/sha256"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
)

// statementByStatement is the PostgreSQL dialect without its batched
// reads: LoadConfigDelta one statement at a time, as on SQLite.
func statementByStatement() *sqlstore.Dialect {
	d := *postgres.Dialect
	d.ReadBatch = nil
	return &d
}

// P-RUNTIME-1 (incremental): the delta a replica reads in one batch
// equals the one read statement by statement, after every one of a
// random sequence of admin mutations and where the log cannot vouch.
func TestBatchedDeltaEqualsStatements(t *testing.T) {
	t.Parallel()
	if postgres.Dialect.ReadBatch == nil {
		t.Fatal("the PostgreSQL dialect reads deltas statement by statement")
	}
	clk := fakeclock.New(time.Time{})
	st, err := postgres.Open(context.Background(), pgtest.Schema(t), postgres.Options{Now: clk.Now, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	storetest.DeltaReadsAgree(t, st, sqlstore.New(st.DB(), statementByStatement(), clk.Now, nil), clk)
}

// countingDialer counts the writes of every connection it dials: each
// round trip to the server starts with one.
type countingDialer struct{ writes atomic.Int64 }

type countingConn struct {
	net.Conn
	d *countingDialer
}

func (c countingConn) Write(b []byte) (int, error) {
	c.d.writes.Add(1)
	return c.Conn.Write(b)
}

func (d *countingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return countingConn{c, d}, nil
}

// A delta read, the read every replica runs on every change, is one
// round trip on PostgreSQL once its statements are prepared on the
// connection; it was one per statement (the test logs both counts).
func TestDeltaReadIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	u := pgtest.Schema(t)
	ctx := context.Background()
	st, err := postgres.Open(ctx, u, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	var dialer countingDialer
	cfg.DialFunc = dialer.dial
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	// One connection, so the statements prepared on it serve every read.
	db.SetMaxOpenConns(1)
	for _, tc := range []struct {
		name string
		d    *sqlstore.Dialect
		want int64 // 0: only logged
	}{{"batched", postgres.Dialect, 1}, {"statement by statement", statementByStatement(), 0}} {
		reader := sqlstore.New(db, tc.d, nil, nil)
		gen, err := st.ConfigGeneration(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var per []int64
		for i := range 3 {
			name := tc.name + string(rune('a'+i))
			p, err := st.CreatePrincipal(ctx, store.Principal{Name: name, Kind: "machine", Enabled: true})
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.Sum256([]byte(name))
			if _, err := st.CreateKey(ctx, store.Key{PrincipalID: p.ID, Prefix: "k", Hash: h[:]}); err != nil {
				t.Fatal(err)
			}
			before := dialer.writes.Load()
			d, err := reader.LoadConfigDelta(ctx, gen)
			if err != nil {
				t.Fatal(err)
			}
			per = append(per, dialer.writes.Load()-before)
			if len(d.Principals) != 1 || d.Principals[0].ID != p.ID || len(d.Keys) != 1 {
				t.Fatalf("%s: delta since %d: %d principals, %d keys", tc.name, gen, len(d.Principals), len(d.Keys))
			}
			gen = d.Generation
		}
		t.Logf("%s: round trips per delta read %v (the first prepares its statements)", tc.name, per)
		if tc.want > 0 && per[len(per)-1] != tc.want {
			t.Errorf("%s: a delta read took %d round trips, want %d", tc.name, per[len(per)-1], tc.want)
		}
	}
}
