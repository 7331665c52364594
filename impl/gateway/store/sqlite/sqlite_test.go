package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

func TestExercise(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T, clk *fakeclock.Clock) store.Store {
		st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "proxy.db"), sqlite.Options{Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// The private in-memory database passes the same suite (one connection).
func TestExerciseInMemory(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T, clk *fakeclock.Clock) store.Store {
		st, err := sqlite.Open(context.Background(), sqlite.Memory, sqlite.Options{Now: clk.Now})
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
