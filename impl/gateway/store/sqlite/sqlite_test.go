package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
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
