// Package pgtest gives each test its own namespace on the PostgreSQL server
// named by TEST_DATABASE_URL (scripts/postgres.sh starts one), so tests run
// in parallel against one server without seeing each other's rows.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// TB is what the helpers need of a test: *testing.T and Ginkgo's GinkgoT()
// both provide it.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Cleanup(func())
}

// URL returns TEST_DATABASE_URL. Without it the test fails in CI (a skipped
// PostgreSQL run must not pass as green) and is skipped elsewhere.
func URL(t TB) string {
	t.Helper()
	u := os.Getenv("TEST_DATABASE_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("TEST_DATABASE_URL is required in CI (scripts/postgres.sh starts one); PostgreSQL tests must not be skipped")
		}
		t.Skip("TEST_DATABASE_URL not set; run: export TEST_DATABASE_URL=$(bash scripts/postgres.sh | tail -1)")
	}
	return u
}

var seq atomic.Int64

// name is unique across the test processes sharing one server.
func name() string {
	return fmt.Sprintf("t_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, seq.Add(1))
}

// Schema creates an empty schema and returns a URL whose connections use it
// (search_path); the schema is dropped when the test ends.
func Schema(t TB) string {
	t.Helper()
	u, n := create(t, "CREATE SCHEMA %s", "DROP SCHEMA %s CASCADE")
	q := u.Query()
	q.Set("search_path", n)
	u.RawQuery = q.Encode()
	return u.String()
}

// Database creates an empty database and returns its URL; it is dropped
// when the test ends. Tests that LISTEN need one: notifications are scoped
// to a database, not a schema.
func Database(t TB) string {
	t.Helper()
	u, n := create(t, "CREATE DATABASE %s", "DROP DATABASE %s WITH (FORCE)")
	u.Path = "/" + n
	return u.String()
}

// create runs the create statement for a fresh name on the server, arranges
// the drop, and returns the server's URL to derive the test's URL from.
func create(t TB, createStmt, dropStmt string) (*url.URL, string) {
	t.Helper()
	base := URL(t)
	n := name()
	exec(t, base, fmt.Sprintf(createStmt, n))
	t.Cleanup(func() { drop(base, fmt.Sprintf(dropStmt, n)) })
	return parse(t, base), n
}

func parse(t TB, base string) *url.URL {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	return u
}

func exec(t TB, u, stmt string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		t.Fatalf("connect to TEST_DATABASE_URL: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Fatalf("%s: %v", stmt, err)
	}
}

// drop is best effort: a leftover namespace only costs space on a scratch
// server, and failing a test that already finished helps no one.
func drop(u, stmt string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, u); err == nil {
		_, _ = conn.Exec(ctx, stmt) // cleanup of a throwaway schema or database: best effort
		conn.Close(context.Background())
	}
}
