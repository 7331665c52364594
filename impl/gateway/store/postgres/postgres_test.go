package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/storetest"
)

func databaseURL(t *testing.T) string {
	u := os.Getenv("TEST_DATABASE_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL is required in CI (scripts/postgres.sh starts one); the PostgreSQL suite must not be skipped")
		}
		t.Skip("TEST_DATABASE_URL not set; run: export TEST_DATABASE_URL=$(bash scripts/postgres.sh)")
	}
	return u
}

var schemaSeq atomic.Int64

// freshSchema creates an empty schema and returns a URL whose connections
// use it, so every test gets its own database namespace.
func freshSchema(t *testing.T, base string) string {
	t.Helper()
	name := fmt.Sprintf("t_%d_%d", time.Now().UnixNano()%1e12, schemaSeq.Add(1))
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE SCHEMA " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db, err := sql.Open("pgx", base)
		if err == nil {
			db.Exec("DROP SCHEMA " + name + " CASCADE")
			db.Close()
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestExercise(t *testing.T) {
	base := databaseURL(t)
	storetest.Exercise(t, func(t *testing.T, clk *storetest.Clock) store.Store {
		st, err := postgres.Open(context.Background(), freshSchema(t, base), postgres.Options{Now: clk.Now, MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}

// Replicas starting at once migrate once: the advisory lock serialises them.
func TestConcurrentMigrations(t *testing.T) {
	u := freshSchema(t, databaseURL(t))
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			st, err := postgres.Open(context.Background(), u, postgres.Options{})
			if err == nil {
				st.Close()
			}
			errs <- err
		}()
	}
	for i := 0; i < 4; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// Time columns are timestamps on PostgreSQL (unix seconds on SQLite).
func TestTimeColumnsAreTimestamps(t *testing.T) {
	u := freshSchema(t, databaseURL(t))
	st, err := postgres.Open(context.Background(), u, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var typ string
	if err := st.DB().QueryRow("SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'upstreams' AND column_name = 'updated_at'").Scan(&typ); err != nil {
		t.Fatal(err)
	}
	if typ != "timestamp with time zone" {
		t.Fatalf("updated_at is %s", typ)
	}
}
