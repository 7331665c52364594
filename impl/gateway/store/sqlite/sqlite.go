// Package sqlite opens the gateway's embedded default database: a single
// SQLite file through the pure-Go modernc.org/sqlite driver.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/service"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Options configures Open.
type Options struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// AllowContract applies contract-phase migrations.
	AllowContract bool
}

// Dialect is SQLite's: unix-second times, '?' placeholders.
var Dialect = &sqlstore.Dialect{
	Name:       "sqlite",
	UnixTime:   true,
	HourBucket: "(at / 3600) * 3600",
	// The full read's keys, principals and chain entries: one joined row
	// a table, the keys in two halves by rowid, each on a connection of
	// its own (sqlstore/joined.go, fullkeys.go).
	JoinRows: true, RowID: "rowid",

	// One write at a time, queued in the store (sqlstore.Dialect.OneWriter).
	OneWriter: true,

	IsUnique:     func(err error) bool { return strings.Contains(err.Error(), "UNIQUE constraint failed") },
	IsForeignKey: func(err error) bool { return strings.Contains(err.Error(), "FOREIGN KEY constraint failed") },
	IsUnavailable: func(err error) bool {
		m := err.Error()
		return strings.Contains(m, "unable to open database") || strings.Contains(m, "disk I/O error") ||
			strings.Contains(m, "no such table")
	},
}

// DSN is the connection string for a database file: WAL so readers never
// block the writer, a busy timeout so writers outside the store's own queue
// (Dialect.OneWriter: the scheduler's, another process's) wait instead of
// failing, immediate transactions so a reader never has to upgrade its lock,
// foreign keys on, and every commit synced (synchronous=FULL): under WAL,
// NORMAL syncs only at checkpoints, so a power cut could roll back
// acknowledged changes (a key revocation, request events) made since the
// last one (docs/operations.md, "Power loss on SQLite").
func DSN(path string) string { return dsn(path, 10*time.Second) }

// dsn is DSN with busy as the time a write waits for another's lock.
func dsn(path string, busy time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}

// Memory is the path of a private in-memory database (tests).
const Memory = ":memory:"

// OpenDB opens the database file without migrating.
func OpenDB(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, err
	}
	if path == Memory {
		// Every connection would open its own empty database: keep one,
		// for ever.
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(1)
		db.SetConnMaxLifetime(0)
		db.SetConnMaxIdleTime(0)
		return db, nil
	}
	// One writer at a time is SQLite's model; a few connections let reads
	// proceed beside it under WAL.
	db.SetMaxOpenConns(4)
	return db, nil
}

// Open opens (creating if needed) and migrates the database at path.
func Open(ctx context.Context, path string, o Options) (*sqlstore.Store, error) {
	db, err := OpenDB(path)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// The file holds sealed credentials and key hashes: owner-only, like
	// the key file beside it.
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if path == Memory {
			break
		}
		if err := os.Chmod(f, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			db.Close()
			return nil, fmt.Errorf("restrict %s: %w", f, err)
		}
	}
	ms, err := Migrations()
	if err != nil {
		db.Close()
		return nil, err
	}
	if _, err := sqlstore.Migrate(ctx, db, Dialect, ms, sqlstore.MigrateOptions{AllowContract: o.AllowContract, Logger: o.Logger}); err != nil {
		db.Close()
		return nil, err
	}
	return sqlstore.New(db, Dialect, service.Options{Logger: o.Logger, Clock: o.Clock}), nil
}

// Migrations returns SQLite's numbered migrations.
func Migrations() ([]sqlstore.Migration, error) {
	return sqlstore.LoadMigrations(migrationFS, "migrations")
}
