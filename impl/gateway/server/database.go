package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pillarhq/pillar/impl/gateway/notify"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/service"
)

// Driver is the database engine a database URL names.
type Driver string

const (
	// SQLite is the embedded default: one process, files beside the database.
	SQLite Driver = "sqlite"
	// Postgres is shared by replicas: pools, a connection budget, and
	// change notifications between them.
	Postgres Driver = "postgres"
)

// DatabaseURL is a database URL parsed once (Config.Validate keeps it) and
// passed by value from there: nothing downstream parses the string again.
type DatabaseURL struct {
	Driver Driver
	// DSN is the driver's connection string: the file path (SQLite) or the
	// URL itself (PostgreSQL).
	DSN string
	url string
}

// ParseDatabaseURL splits a database URL into its driver and the driver's
// connection string.
func ParseDatabaseURL(u string) (DatabaseURL, error) {
	switch {
	case strings.HasPrefix(u, "sqlite://"):
		p := strings.TrimPrefix(u, "sqlite://")
		if p == "" {
			return DatabaseURL{}, errors.New("sqlite:// needs a file path, e.g. sqlite://proxy.db")
		}
		return DatabaseURL{Driver: SQLite, DSN: p, url: u}, nil
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return DatabaseURL{Driver: Postgres, DSN: u, url: u}, nil
	default:
		return DatabaseURL{}, fmt.Errorf("%q: want sqlite://PATH or postgres://…", redactURL(u))
	}
}

// String is the URL with its password hidden, safe to print.
func (d DatabaseURL) String() string { return redactURL(d.url) }

// fileBeside is the path of a file kept beside an embedded database (the
// master key, the admin token). ok is false on PostgreSQL: replicas share
// no disk, so what such a file holds must come from the environment.
func (d DatabaseURL) fileBeside(suffix string) (path string, ok bool) {
	if d.Driver != SQLite {
		return "", false
	}
	return d.DSN + suffix, true
}

// storage is the database as this process uses it: opened once at start
// and handed to every phase, which asks it for what depends on the driver
// (the scheduler's connections, the change notifications) instead of
// branching on the driver itself.
type storage struct {
	db DatabaseURL
	st store.Store
}

// openStorage checks the connection budget (PostgreSQL) and opens the store.
func openStorage(ctx context.Context, cfg *Config, log *slog.Logger) (*storage, error) {
	db := cfg.db
	if db.Driver == Postgres {
		if err := checkServerBudget(ctx, cfg, db.DSN); err != nil {
			return nil, err
		}
	}
	st, err := openStore(ctx, cfg, db, log)
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", db.Driver, err)
	}
	return &storage{db: db, st: st}, nil
}

func openStore(ctx context.Context, cfg *Config, db DatabaseURL, log *slog.Logger) (store.Store, error) {
	if db.Driver == SQLite {
		return sqlite.Open(ctx, db.DSN, sqlite.Options{Logger: log.With("component", "store"), Clock: cfg.clock, AllowContract: cfg.MigrateContract})
	}
	return postgres.Open(ctx, db.DSN, postgres.Options{Logger: log.With("component", "store"), Clock: cfg.clock, MaxConns: cfg.Database.MainPool, AllowContract: cfg.MigrateContract})
}

// checkServerBudget refuses to start when the configured pools and replica
// count do not fit the server's max_connections.
func checkServerBudget(ctx context.Context, cfg *Config, dsn string) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	var max int
	if err := conn.QueryRow(cctx, "SELECT current_setting('max_connections')::int").Scan(&max); err != nil {
		return fmt.Errorf("read max_connections: %w", err)
	}
	return CheckBudget(cfg.Database.MainPool, cfg.Database.SchedulerPool, cfg.Database.Replicas, max)
}

// newScheduler opens the scheduler's own connections to the database (a
// pool of database.scheduler_pool on PostgreSQL, one connection on SQLite)
// and the durable scheduler on them. The returned func closes them.
func (s *storage) newScheduler(ctx context.Context, pool int, types []scheduler.Type, o scheduler.Options) (*scheduler.Scheduler, func(), error) {
	if s.db.Driver == SQLite {
		db, err := sqlite.OpenDB(s.db.DSN)
		if err != nil {
			return nil, nil, err
		}
		db.SetMaxOpenConns(1) // River on SQLite: one connection avoids SQLITE_BUSY between its own goroutines
		sc, err := scheduler.NewSQLite(ctx, db, types, o)
		if err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("scheduler: %w", err)
		}
		return sc, func() { db.Close() }, nil
	}
	pcfg, err := pgxpool.ParseConfig(s.db.DSN)
	if err != nil {
		return nil, nil, err
	}
	pcfg.MaxConns = int32(pool)
	p, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, err
	}
	sc, err := scheduler.NewPostgres(ctx, p, types, o)
	if err != nil {
		p.Close()
		return nil, nil, fmt.Errorf("scheduler: %w", err)
	}
	return sc, p.Close, nil
}

// changeListener hears the changes other replicas commit (PostgreSQL
// LISTEN). Nil on SQLite: one process, no other replica to hear.
func (s *storage) changeListener(o service.Options, onChange func(ctx context.Context, payload string)) *notify.Listener {
	if s.db.Driver != Postgres {
		return nil
	}
	return notify.New(s.db.DSN, notify.Channel, o, onChange)
}
