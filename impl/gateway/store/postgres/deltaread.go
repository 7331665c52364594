package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
)

// beginSnapshotRead opens the batch's transaction: one snapshot for every
// statement (READ COMMITTED would take one per statement).
const beginSnapshotRead = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"

// readBatch is the dialect's ReadBatch: BEGIN, the statements and COMMIT
// go out as one pipeline on a pgx connection taken from database/sql's
// pool, and their results come back together. Every replica reads a
// delta on every change; through database/sql each statement was a round
// trip of its own (8 for a principal's change, BEGIN and COMMIT
// included): about a third of a replica's CPU went to the system calls of
// round trips under admin load (docs/benchmarks.md, "Why the scale targets
// stand where they do").
func readBatch(ctx context.Context, db *sql.DB, qs []sqlstore.BatchQuery) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok { // a driver wrapping pgx's: the store reads one statement at a time
			return fmt.Errorf("postgres: database/sql connection is %T, not pgx's: %w", dc, errors.ErrUnsupported)
		}
		return sendBatch(ctx, c.Conn(), qs)
	})
}

func sendBatch(ctx context.Context, c *pgx.Conn, qs []sqlstore.BatchQuery) error {
	b := &pgx.Batch{}
	b.Queue(beginSnapshotRead)
	for _, q := range qs {
		b.Queue(q.SQL, q.Args...)
	}
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, b)
	err := readResults(br, qs)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil && !c.IsClosed() && c.PgConn().TxStatus() != 'I' {
		// A failed statement leaves its transaction open and aborted:
		// the connection goes back to the pool only once rolled back,
		// else database/sql drops it (driver.ErrBadConn).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, rerr := c.Exec(rctx, "ROLLBACK")
		cancel()
		if rerr != nil {
			return errors.Join(err, driver.ErrBadConn)
		}
	}
	return err
}

// readResults reads the batch's results in order: BEGIN, each statement
// through its Read, COMMIT.
func readResults(br pgx.BatchResults, qs []sqlstore.BatchQuery) error {
	if _, err := br.Exec(); err != nil { // BEGIN
		return err
	}
	for _, q := range qs {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		err = q.Read(rows)
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
		if err != nil {
			return err
		}
	}
	_, err := br.Exec()
	return err
}
