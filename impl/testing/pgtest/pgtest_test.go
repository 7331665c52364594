package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pillarhq/pillar/impl/testing/pgtest"
)

func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// A table made in one test's schema is invisible in another's.
func TestSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	a, b := connect(t, pgtest.Schema(t)), connect(t, pgtest.Schema(t))
	ctx := context.Background()
	if _, err := a.Exec(ctx, "CREATE TABLE only_here (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, "SELECT * FROM only_here"); err == nil {
		t.Fatal("a table of one schema is visible in another")
	}
	if _, err := a.Exec(ctx, "SELECT * FROM only_here"); err != nil {
		t.Fatal(err)
	}
}

// Database returns a database of its own.
func TestDatabaseIsFresh(t *testing.T) {
	t.Parallel()
	conn := connect(t, pgtest.Database(t))
	var name string
	if err := conn.QueryRow(context.Background(), "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	if base := connect(t, pgtest.URL(t)); base.Config().Database == name {
		t.Fatalf("Database returned the base database %s", name)
	}
}
