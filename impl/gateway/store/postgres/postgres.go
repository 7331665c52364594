// Package postgres opens the gateway's PostgreSQL database (pgx/v5 through
// database/sql) for multi-replica deployments.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/notify"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/service"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Options configures Open.
type Options struct {
	Logger   *slog.Logger
	Clock    clock.Clock
	MaxConns int
	// AllowContract applies contract-phase migrations.
	AllowContract bool
}

// migrationLock serialises migrators of concurrently starting replicas.
const migrationLock = "SELECT pg_advisory_xact_lock(7428190412)"

// Dialect is PostgreSQL's: timestamptz, numbered placeholders, and a NOTIFY
// on the configuration channel in every configuration transaction.
var Dialect = &sqlstore.Dialect{
	Name:       "postgres",
	Numbered:   true,
	HourBucket: "date_trunc('hour', at)",
	// pgx prepares and caches every statement per connection already
	// (QueryExecModeCacheStatement): the store's own cache only added
	// allocations (BenchmarkAdminWrites).
	SkipPrepare: true,
	// A replica's delta read in one round trip (deltaread.go).
	ReadBatch: readBatch,
	IsUnique: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23505"
	},
	IsForeignKey: func(err error) bool {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23503"
	},
	ForShare: " FOR SHARE", ForUpdate: " FOR UPDATE",
	ExportSnapshot: "SELECT pg_export_snapshot()", ImportSnapshot: "SET TRANSACTION SNAPSHOT '%s'",
	RawQuery: rawQuery, // fullread.go
	IsUnavailable: func(err error) bool {
		var ce *pgconn.ConnectError
		var pe *pgconn.PgError
		if errors.As(err, &ce) {
			return true
		}
		// Class 08 connection exceptions, 57P admin shutdown, 53 resources.
		return errors.As(err, &pe) && (pe.Code[:2] == "08" || pe.Code[:3] == "57P" || pe.Code[:2] == "53")
	},
	NotifyChannel: notify.Channel,
}

// Open connects and migrates.
func Open(ctx context.Context, url string, o Options) (*sqlstore.Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, err
	}
	if o.MaxConns > 0 {
		db.SetMaxOpenConns(o.MaxConns)
		db.SetMaxIdleConns(o.MaxConns)
	}
	db.SetConnMaxIdleTime(5 * time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	ms, err := sqlstore.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		db.Close()
		return nil, err
	}
	if _, err := sqlstore.Migrate(ctx, db, Dialect, ms, sqlstore.MigrateOptions{AllowContract: o.AllowContract, Lock: migrationLock, Logger: o.Logger}); err != nil {
		db.Close()
		return nil, err
	}
	return sqlstore.New(db, Dialect, service.Options{Logger: o.Logger, Clock: o.Clock}), nil
}

var _ = stdlib.GetDefaultDriver // registers the "pgx" database/sql driver
