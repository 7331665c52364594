package harness

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/pillarhq/pillar/impl/testing/pgtest"
)

// PostgresURL is the test server's URL from TEST_DATABASE_URL (set by
// scripts/postgres.sh in make test). Without it the spec fails in CI and is
// skipped elsewhere (store area: impl/testing/pgtest is the one copy).
func PostgresURL() string { return pgtest.URL(GinkgoT()) }

// FreshSchema creates an empty schema for one spec and returns a URL whose
// connections use it; the schema is dropped after the spec.
func FreshSchema() string { return pgtest.Schema(GinkgoT()) }

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

// PG is a private PostgreSQL server for specs that stop and restart the
// database. It runs as the postgres OS user from the distribution's
// binaries (scripts/setup.sh installs them).
type PG struct {
	Dir, Port, URL string
	bin            string
}

func pgBin() string {
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(m) == 0 {
		Fail("PostgreSQL server binaries not found under /usr/lib/postgresql (run scripts/setup.sh)")
	}
	return filepath.Dir(m[len(m)-1])
}

func asPostgres(args ...string) string {
	cmd := exec.Command(args[0], args[1:]...)
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...)
	}
	out, err := cmd.CombinedOutput()
	ExpectWithOffset(2, err).NotTo(HaveOccurred(), "%v: %s", args, out)
	return string(out)
}

// StartPG initialises and starts a private server; it is removed after the spec.
func StartPG() *PG {
	base, err := os.MkdirTemp("", "pillar-pg-")
	Expect(err).NotTo(HaveOccurred())
	Expect(os.Chmod(base, 0o777)).To(Succeed())
	_, port, _ := net.SplitHostPort(FreeAddr())
	pg := &PG{Dir: filepath.Join(base, "data"), Port: port, bin: pgBin(),
		URL: "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable"}
	asPostgres(pg.bin+"/initdb", "-D", pg.Dir, "-U", "postgres", "-A", "trust", "--no-sync")
	pg.Start()
	DeferCleanup(func() {
		_ = exec.Command("runuser", "-u", "postgres", "--", pg.bin+"/pg_ctl", "-D", pg.Dir, "-m", "immediate", "stop").Run() // best effort: the directory goes next
		os.RemoveAll(base)
	})
	return pg
}

// Start starts (or restarts) the server and waits until it accepts connections.
func (pg *PG) Start() {
	asPostgres(pg.bin+"/pg_ctl", "-D", pg.Dir, "-l", pg.Dir+"/../log", "-w", "-t", "60",
		"-o", "-p "+pg.Port+" -c listen_addresses=127.0.0.1 -k "+filepath.Dir(pg.Dir)+" -c fsync=off -c max_connections=100", "start")
}

// Stop stops the server at once, as a crash or an outage would.
func (pg *PG) Stop() {
	asPostgres(pg.bin+"/pg_ctl", "-D", pg.Dir, "-m", "immediate", "-w", "stop")
}
