package scheduler

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
)

// migrationLockKey names the advisory lock around River's migrations.
const migrationLockKey int64 = 7428190413

// NewPostgres returns a scheduler on PostgreSQL, migrating River's tables.
func NewPostgres(ctx context.Context, pool *pgxpool.Pool, types []Type, o Options) (*Scheduler, error) {
	s, err := newScheduler(types, o)
	if err != nil {
		return nil, err
	}
	drv := riverpgxv5.New(pool)
	// Replicas starting together would race on River's migrations (two
	// CREATE TYPE of one name); a session advisory lock serialises them.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockKey); err != nil {
		return nil, fmt.Errorf("river migration lock: %w", err)
	}
	err = migrate[pgx.Tx](ctx, drv)
	if _, uerr := conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrationLockKey); uerr != nil {
		// The lock belongs to the session: a connection that may still
		// hold it must not go back to the pool, where it would block every
		// later migration for as long as it lives.
		_ = conn.Conn().Close(context.Background())
	}
	if err != nil {
		return nil, err
	}
	o.defaults()
	c, err := river.NewClient(drv, s.riverConfig(o))
	if err != nil {
		return nil, err
	}
	s.client = c
	return s, nil
}

// NewSQLite returns a scheduler on SQLite, migrating River's tables.
func NewSQLite(ctx context.Context, db *sql.DB, types []Type, o Options) (*Scheduler, error) {
	s, err := newScheduler(types, o)
	if err != nil {
		return nil, err
	}
	drv := riversqlite.New(db)
	if err := migrate[*sql.Tx](ctx, drv); err != nil {
		return nil, err
	}
	if o.PollInterval <= 0 {
		o.PollInterval = SQLitePollInterval
	}
	o.defaults()
	s.alarm = newAlarm(s.Logger, s.ring, o.PollInterval)
	c, err := river.NewClient(drv, s.riverConfig(o))
	if err != nil {
		return nil, err
	}
	s.client = c
	return s, nil
}

func migrate[TTx any](ctx context.Context, drv riverdriver.Driver[TTx]) error {
	m, err := rivermigrate.New[TTx](drv, nil)
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}
