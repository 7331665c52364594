package postgres_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/cputime"
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
	st, err := postgres.Open(context.Background(), pgtest.Schema(t), postgres.Options{Clock: clk, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	storetest.DeltaReadsAgree(t, st, sqlstore.New(st.DB(), statementByStatement(), service.Options{Clock: clk}), clk)
}

// noPing keeps database/sql from pinging a connection idle for more than
// a second before handing it out (pgx's default): on a slow machine it
// would count as one more round trip of the read.
var noPing = stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return false })

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
	db := stdlib.OpenDB(*cfg, noPing)
	defer db.Close()
	// One connection, so the statements prepared on it serve every read.
	db.SetMaxOpenConns(1)
	for _, tc := range []struct {
		name string
		d    *sqlstore.Dialect
		want int64 // 0: only logged
	}{{"batched", postgres.Dialect, 1}, {"statement by statement", statementByStatement(), 0}} {
		reader := sqlstore.New(db, tc.d, service.Options{})
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

// BenchmarkDeltaRead is the read a replica runs on a change notification
// (the delta of one created principal with its key, over a configuration
// of 1,000 principals), batched and statement by statement in one
// process: this process's CPU per read (cpu-ns/op), the server backend's
// when it runs on this host (server-cpu-ns/op, from /proc at clock-tick
// resolution) and round trips (writes to the server) per read.
func BenchmarkDeltaRead(b *testing.B) {
	u := pgtest.Schema(b)
	ctx := context.Background()
	st, err := postgres.Open(ctx, u, postgres.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	for i := range 1000 {
		p, err := st.CreatePrincipal(ctx, store.Principal{Name: "p" + strconv.Itoa(i), Kind: "machine", Enabled: true, AllowedModels: []string{"claude-*"}})
		if err != nil {
			b.Fatal(err)
		}
		h := sha256.Sum256([]byte(p.ID))
		if _, err := st.CreateKey(ctx, store.Key{PrincipalID: p.ID, Prefix: "k", Hash: h[:]}); err != nil {
			b.Fatal(err)
		}
	}
	gen, err := st.ConfigGeneration(ctx)
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		d    *sqlstore.Dialect
	}{{"batched", postgres.Dialect}, {"statements", statementByStatement()}} {
		b.Run(tc.name, func(b *testing.B) {
			var dialer countingDialer
			c := *cfg
			c.DialFunc = dialer.dial
			db := stdlib.OpenDB(c, noPing)
			defer db.Close()
			db.SetMaxOpenConns(1)
			reader := sqlstore.New(db, tc.d, service.Options{})
			if _, err := reader.LoadConfigDelta(ctx, gen-1); err != nil { // prepares
				b.Fatal(err)
			}
			var backend int
			if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			w0, cpu0, srv0 := dialer.writes.Load(), cputime.Process(), procCPU(backend)
			b.ResetTimer()
			for range b.N {
				d, err := reader.LoadConfigDelta(ctx, gen-1)
				if err != nil {
					b.Fatal(err)
				}
				if len(d.Principals) != 1 || len(d.Keys) != 1 {
					b.Fatalf("delta: %d principals, %d keys", len(d.Principals), len(d.Keys))
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(dialer.writes.Load()-w0)/float64(b.N), "roundtrips/op")
			if srv := procCPU(backend); srv0 >= 0 && srv >= 0 {
				b.ReportMetric(float64((srv-srv0).Nanoseconds())/float64(b.N), "server-cpu-ns/op")
			}
		})
	}
}

// procCPU is the user and system time of process pid on this host, -1
// when it cannot be read (a server elsewhere).
func procCPU(pid int) time.Duration {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// Fields after the command (which may hold spaces): utime and stime
	// are the 12th and 13th, in clock ticks (100 a second on Linux).
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(u+s) * 10 * time.Millisecond
}

// A batch whose statement fails reports the error and hands its
// connection back, rolled back rather than dropped: the next use of the
// pool's only connection is the same session, outside any transaction.
func TestFailedBatchLeavesConnectionClean(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pgtest.Schema(t))
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	db.SetMaxOpenConns(1)
	var pid, after int
	if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var got []int
	read := func(r sqlstore.BatchRows) error {
		for r.Next() {
			var n int
			if err := r.Scan(&n); err != nil {
				return err
			}
			got = append(got, n)
		}
		return r.Err()
	}
	err = postgres.Dialect.ReadBatch(ctx, db, []sqlstore.BatchQuery{
		{SQL: "SELECT 1", Read: read},
		{SQL: "SELECT 1 / (SELECT 0)", Read: read},
		{SQL: "SELECT 3", Read: read},
	})
	if err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("batch with a failing statement: %v, want division by zero", err)
	}
	var n int
	var iso string
	if err := db.QueryRowContext(ctx, "SELECT 2, current_setting('transaction_isolation'), pg_backend_pid()").Scan(&n, &iso, &after); err != nil ||
		n != 2 || iso != "read committed" || after != pid {
		t.Fatalf("after the failed batch: %d %q, session %d (was %d), %v", n, iso, after, pid, err)
	}
	got = nil
	if err := postgres.Dialect.ReadBatch(ctx, db, []sqlstore.BatchQuery{{SQL: "SELECT 4", Read: read}}); err != nil || len(got) != 1 || got[0] != 4 {
		t.Fatalf("next batch: %v, %v", got, err)
	}
}
