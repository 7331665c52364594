package harness

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// PostgresURL is the test server's URL from TEST_DATABASE_URL (set by
// scripts/postgres.sh in make test). Without it the spec fails in CI and is
// skipped elsewhere.
func PostgresURL() string {
	u := os.Getenv("TEST_DATABASE_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			Fail("TEST_DATABASE_URL is required in CI (scripts/postgres.sh starts one)")
		}
		Skip("TEST_DATABASE_URL not set; run: export TEST_DATABASE_URL=$(bash scripts/postgres.sh)")
	}
	return u
}

var schemaSeq atomic.Int64

// FreshSchema creates an empty schema for one spec and returns a URL whose
// connections use it; the schema is dropped after the spec.
func FreshSchema() string {
	base := PostgresURL()
	name := fmt.Sprintf("c_%d_%d", time.Now().UnixNano()%1e12, schemaSeq.Add(1))
	ExecSQL(base, "CREATE SCHEMA "+name)
	DeferCleanup(func() { ExecSQL(base, "DROP SCHEMA "+name+" CASCADE") })
	u, err := url.Parse(base)
	Expect(err).NotTo(HaveOccurred())
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// ExecSQL runs statements on the database at u.
func ExecSQL(u string, stmts ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(context.Background())
	for _, s := range stmts {
		_, err := conn.Exec(ctx, s)
		Expect(err).NotTo(HaveOccurred(), s)
	}
}
