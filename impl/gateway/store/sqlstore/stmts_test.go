package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	msqlite "modernc.org/sqlite"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
)

// parsingConn counts the statements the driver is handed as text: on
// SQLite each one prepared, or executed or queried without a prepared
// statement, is parsed; on PostgreSQL each is a round trip.
type parsingConn struct {
	fullConn
	parses *atomic.Int64
}

type fullConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
}

func (c parsingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	c.parses.Add(1)
	return c.fullConn.PrepareContext(ctx, q)
}

func (c parsingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.parses.Add(1)
	return c.fullConn.ExecContext(ctx, q, args)
}

func (c parsingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.parses.Add(1)
	return c.fullConn.QueryContext(ctx, q, args)
}

type parsingConnector struct {
	dsn    string
	parses *atomic.Int64
	driver driver.Driver // nil: SQLite's
}

func (c parsingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.Driver().Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return parsingConn{conn.(fullConn), c.parses}, nil
}

func (c parsingConnector) Driver() driver.Driver {
	if c.driver != nil {
		return c.driver
	}
	return &msqlite.Driver{}
}

// openCounting opens a migrated SQLite store whose parses are counted.
func openCounting(t *testing.T, d *sqlstore.Dialect) (*sqlstore.Store, *atomic.Int64) {
	t.Helper()
	var parses atomic.Int64
	db := sql.OpenDB(parsingConnector{sqlite.DSN(filepath.Join(t.TempDir(), "proxy.db")), &parses, nil})
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	ms, err := sqlite.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqlstore.Migrate(context.Background(), db, d, ms, sqlstore.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	return sqlstore.New(db, d, service.Options{}), &parses
}

// adminRound is what an admin client and the rebuild after it do: create
// a principal, patch it, issue and revoke a key, read it back, read the delta.
func adminRound(t *testing.T, st *sqlstore.Store, i int) {
	t.Helper()
	ctx := context.Background()
	gen, err := st.ConfigGeneration(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.CreatePrincipal(ctx, store.Principal{Name: fmt.Sprint("p", i), Kind: "machine", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	models := []string{"claude-*"}
	if p, err = st.PatchPrincipal(ctx, p.ID, p.Revision, store.PrincipalPatch{AllowedModels: &models}); err != nil {
		t.Fatal(err)
	}
	k, err := st.CreateKey(ctx, store.Key{PrincipalID: p.ID, Name: "k", Prefix: "pk", Hash: []byte(fmt.Sprint("hash", i))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.RevokeKey(ctx, p.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := st.GetPrincipal(ctx, p.ID); err != nil || len(got.AllowedModels) != 1 {
		t.Fatalf("principal read back: %+v %v", got, err)
	}
	d, err := st.LoadConfigDelta(ctx, gen)
	if err != nil || len(d.Principals) != 1 || d.Principals[0].ID != p.ID {
		t.Fatalf("delta after %d: %+v %v", gen, d, err)
	}
}

// After its first runs, the store's admin writes and delta reads hand
// SQLite no statement to parse: each is prepared once and re-used
// (parsing was a large share of the proxy's CPU under admin load).
func TestStatementsParsedOnce(t *testing.T) {
	t.Parallel()
	st, parses := openCounting(t, sqlite.Dialect)
	for i := range 3 {
		adminRound(t, st, i)
	}
	before := parses.Load()
	for i := 3; i < 8; i++ {
		adminRound(t, st, i)
	}
	if n := parses.Load() - before; n != 0 {
		t.Fatalf("%d statements parsed in five warm admin rounds, want 0", n)
	}

	// The control: the same rounds unprepared parse every statement.
	d := *sqlite.Dialect
	d.SkipPrepare = true
	st, parses = openCounting(t, &d)
	adminRound(t, st, 0)
	before = parses.Load()
	adminRound(t, st, 1)
	if n := parses.Load() - before; n < 10 {
		t.Fatalf("unprepared: %d statements parsed in an admin round, want every one (at least 10)", n)
	}
}

// openSQLiteFile opens a fresh SQLite store on a file, closed with t.
func openSQLiteFile(t *testing.T) *sqlstore.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "proxy.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Statement texts past the bound run unprepared, and correctly.
func TestPreparedStatementsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLiteFile(t)
	for i := range sqlstore.MaxPreparedForTest + 50 {
		n, err := sqlstore.QueryIntForTest(ctx, st, fmt.Sprintf("SELECT ? + %d", i), 1)
		if err != nil || n != int64(i+1) {
			t.Fatalf("query %d: %d, %v", i, n, err)
		}
	}
	if n := sqlstore.PreparedForTest(st); n != sqlstore.MaxPreparedForTest {
		t.Fatalf("%d statements kept prepared, want the bound %d", n, sqlstore.MaxPreparedForTest)
	}
}

// Concurrent first uses near the bound do not pass it: the bound is checked
// again when a prepared statement is kept, not only before preparing.
func TestPreparedStatementsBoundedConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLiteFile(t)
	for i := range sqlstore.MaxPreparedForTest - 4 {
		if _, err := sqlstore.QueryIntForTest(ctx, st, fmt.Sprintf("SELECT ? + %d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Go(func() {
			n, err := sqlstore.QueryIntForTest(ctx, st, fmt.Sprintf("SELECT ? + 100000 + %d", g), 1)
			if err == nil && n != int64(100001+g) {
				err = fmt.Errorf("query %d answered %d", g, n)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := sqlstore.PreparedForTest(st); n != sqlstore.MaxPreparedForTest {
		t.Fatalf("%d statements kept prepared, want the bound %d", n, sqlstore.MaxPreparedForTest)
	}
}

// A statement with many placeholders (a long IN list) runs unprepared and
// is not kept: one per list length would pile up for the store's life.
func TestLongStatementsNotKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLiteFile(t)
	for _, n := range []int{4, 40} {
		before := sqlstore.PreparedForTest(st)
		args := make([]any, n)
		for i := range args {
			args[i] = i
		}
		q := "SELECT COUNT(*) FROM (SELECT 1 WHERE 1 IN (" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + "))"
		if got, err := sqlstore.QueryIntForTest(ctx, st, q, args...); err != nil || got != 1 {
			t.Fatalf("%d placeholders: %d, %v", n, got, err)
		}
		kept := sqlstore.PreparedForTest(st) - before
		if want := map[int]int{4: 1, 40: 0}[n]; kept != want {
			t.Fatalf("%d placeholders: %d statements kept, want %d", n, kept, want)
		}
	}
}

// On PostgreSQL a configuration change records itself (audit row,
// generation bump, change log, NOTIFY) in one statement, so a principal
// patch is three round trips inside its transaction, not six.
func TestChangeRecordedInOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u := pgtest.Schema(t)
	st, err := postgres.Open(ctx, u, postgres.Options{}) // migrates
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	var stmts atomic.Int64
	db := sql.OpenDB(parsingConnector{u, &stmts, stdlib.GetDefaultDriver()})
	defer db.Close()
	st = sqlstore.New(db, postgres.Dialect, service.Options{})
	p, err := st.CreatePrincipal(ctx, store.Principal{Name: "p", Kind: "machine", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	before := stmts.Load()
	models := []string{"claude-*"}
	if _, err := st.PatchPrincipal(ctx, p.ID, p.Revision, store.PrincipalPatch{AllowedModels: &models}); err != nil {
		t.Fatal(err)
	}
	if n := stmts.Load() - before; n != 3 {
		t.Fatalf("a principal patch ran %d statements, want 3 (update, read back, change record)", n)
	}
	if gen, err := st.ConfigGeneration(ctx); err != nil || gen != 2 {
		t.Fatalf("generation %d, %v; want 2", gen, err)
	}
	d, err := st.LoadConfigDelta(ctx, 1)
	if err != nil || len(d.PrincipalIDs) != 1 || d.PrincipalIDs[0] != p.ID {
		t.Fatalf("change log of generation 2: %+v, %v", d, err)
	}
	es, err := st.ListAudit(ctx, time.Time{}, 10)
	if err != nil || len(es) != 2 || es[0].Action != "update" || es[0].ResourceID != p.ID {
		t.Fatalf("audit: %+v, %v", es, err)
	}
}
