package sqlite_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	sqlitedrv "modernc.org/sqlite"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

func TestExercise(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T, clk *fakeclock.Clock) store.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "proxy.db"), sqlite.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// The private in-memory database passes the same suite (one connection).
func TestExerciseInMemory(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T, clk *fakeclock.Clock) store.Store {
		st, err := sqlite.Open(context.Background(), sqlite.Memory, sqlite.Options{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// Data survives closing and reopening the file (a process restart).
func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "proxy.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.CreatePrincipal(ctx, store.Principal{Name: "keep", Kind: "machine", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("database file mode %v, %v; it holds sealed credentials", info.Mode().Perm(), err)
	}
	got, err := st.GetPrincipal(ctx, p.ID)
	if err != nil || got.Name != "keep" {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
}

// openTemp opens a fresh database file in tb's temporary directory,
// closed when tb ends.
func openTemp(tb testing.TB) *sqlstore.Store {
	tb.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "proxy.db"), sqlite.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	return st
}

// Every pooled connection syncs each commit (synchronous=FULL = 2): with
// WAL's NORMAL an acknowledged revocation could roll back on a power cut.
func TestEveryConnectionSyncsEachCommit(t *testing.T) {
	ctx := context.Background()
	st := openTemp(t)
	// Hold several connections at once so each is a different one.
	var conns []*sql.Conn
	for range 4 {
		c, err := st.DB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for i, c := range conns {
		var mode, journal string
		if err := c.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&journal); err != nil {
			t.Fatal(err)
		}
		if mode != "2" || journal != "wal" {
			t.Errorf("connection %d: synchronous=%s journal_mode=%s, want 2 (FULL) and wal", i, mode, journal)
		}
		c.Close()
	}
}

// The store's own writers wait their turn in the store, in order, not in
// SQLite's busy handler: that polls with growing sleeps and favours the
// connection that just committed, so with commits that hold the lock long
// (a loaded disk's fsync; here a trigger that sleeps) a waiting writer
// gave up with SQLITE_BUSY after the busy timeout while others kept
// winning the lock. The busy timeout here is shorter than the queue.
func TestWritersQueueRatherThanTimeOut(t *testing.T) {
	ctx := context.Background()
	if err := registerFuncs(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqlite.DSNBusy(filepath.Join(t.TempDir(), "proxy.db"), 60*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	ms, err := sqlite.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sqlstore.Migrate(ctx, db, sqlite.Dialect, ms, sqlstore.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	st := sqlstore.New(db, sqlite.Dialect, service.Options{})
	u, err := st.CreateUpstream(ctx, store.UpstreamSpec{Name: "slow", Kind: store.KindVendorOAuth, BaseURL: "https://x", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	// Each write holds the write lock 20 ms: 30 of them queue for
	// 600 ms, ten times the busy timeout.
	if _, err := db.ExecContext(ctx, `CREATE TRIGGER slow_status AFTER UPDATE ON upstreams
		BEGIN SELECT pillar_test_sleep(20); END`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := time.Unix(1_800_000_000+int64(i), 0)
			if i%2 == 0 { // a transaction and a single statement alike
				errs <- st.SetUpstreamStatus(ctx, u.ID, store.UpstreamStatus{LastApplyAt: &at})
				return
			}
			name := fmt.Sprintf("slow-%d", i)
			_, err := st.PatchUpstream(ctx, u.ID, store.AnyRevision, store.UpstreamPatch{Name: &name})
			if err == nil {
				_, err = st.DB().ExecContext(ctx, "SELECT 1") // a read beside the queue
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// A write whose deadline passes while it waits in the queue fails as the
// database being unavailable, as one whose deadline passes in SQLite does.
func TestAWriteThatTimesOutQueuedIsUnavailable(t *testing.T) {
	ctx := context.Background()
	if err := registerFuncs(); err != nil {
		t.Fatal(err)
	}
	st := openTemp(t)
	u, err := st.CreateUpstream(ctx, store.UpstreamSpec{Name: "held", Kind: store.KindVendorOAuth, BaseURL: "https://x", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.DB().ExecContext(ctx, `CREATE TRIGGER held_status AFTER UPDATE OF last_apply_at ON upstreams
		BEGIN SELECT pillar_test_block(); END`); err != nil {
		t.Fatal(err)
	}
	blockEntered, blockRelease = make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		at := time.Unix(1_800_000_000, 0)
		held <- st.SetUpstreamStatus(ctx, u.ID, store.UpstreamStatus{LastApplyAt: &at})
	}()
	<-blockEntered // the first write holds the queue
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	name := "renamed"
	_, err = st.PatchUpstream(short, u.ID, store.AnyRevision, store.UpstreamPatch{Name: &name})
	close(blockRelease)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a write whose deadline passed in the queue: %v, want ErrUnavailable", err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}

// blockEntered is closed when pillar_test_block() is called, which then
// waits for blockRelease.
var blockEntered, blockRelease chan struct{}

// registerFuncs adds pillar_test_sleep(ms) and pillar_test_block() to the
// driver's SQL functions (once a process: the driver refuses a second
// registration).
var registerFuncs = sync.OnceValue(func() error {
	if err := sqlitedrv.RegisterScalarFunction("pillar_test_block", 0, func(*sqlitedrv.FunctionContext, []driver.Value) (driver.Value, error) {
		close(blockEntered)
		<-blockRelease
		return nil, nil
	}); err != nil {
		return err
	}
	return sqlitedrv.RegisterScalarFunction("pillar_test_sleep", 1, func(_ *sqlitedrv.FunctionContext, args []driver.Value) (driver.Value, error) {
		time.Sleep(time.Duration(args[0].(int64)) * time.Millisecond)
		return nil, nil
	})
})
