package sqlstore

import (
	"context"
	"database/sql"
	"slices"
	"strings"
)

// Every statement the store runs through a txn or s.pool is prepared once
// per store and re-used: modernc.org/sqlite parses and plans an unprepared
// statement on every run, which was a large share of the proxy's CPU
// under admin write load (docs/benchmarks.md, "Admin API under write
// load"). Dialect.SkipPrepare turns this off
// where the driver keeps its own cache (pgx).

// maxPrepared bounds the statements a store keeps prepared. The texts built
// from a variable part (IN lists of a delta, optional filters, the columns
// a patch sets) come in a bounded number of shapes in practice; past the
// bound a new text is run unprepared, as before. Prepared programs cost
// memory on each connection: an admin workload's (creates, patches, key
// issues, delta and full reads, lists) took 130 KB on one.
const maxPrepared = 512

// maxPreparedParams: a text with more placeholders than this (a long IN
// list of a delta read, one shape per length) runs unprepared. Each would
// keep a large program on every connection for the life of the store,
// and reading that many rows costs more than parsing.
const maxPreparedParams = 32

// stmt is the store's prepared statement of q, nil if there is none yet.
func (s *Store) stmt(q string) *sql.Stmt {
	if s.d.SkipPrepare {
		return nil
	}
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	return s.stmts[q]
}

// prepare prepares q on the pool and keeps it under its text; nil when the
// store keeps maxPrepared statements already or q has more than
// maxPreparedParams placeholders. It may wait for a free
// connection, so it is never called by a goroutine inside a transaction
// (an in-memory database has only one connection).
func (s *Store) prepare(ctx context.Context, q string) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	full := len(s.stmts) >= maxPrepared
	s.stmtMu.Unlock()
	if full || strings.Count(q, "?") > maxPreparedParams {
		return nil, nil
	}
	return s.prepared(ctx, q, func() string { return q }, maxPrepared)
}

// prepareAll prepares the statements a finished transaction ran unprepared.
// A failure only leaves the statement unprepared: its next run tries again.
func (s *Store) prepareAll(ctx context.Context, qs []string) {
	for _, q := range qs {
		if _, err := s.prepare(ctx, q); err != nil {
			return
		}
	}
}

// txn is a transaction whose statements run prepared: one the store has
// prepared already is re-used through Tx.StmtContext (database/sql keeps
// it prepared on each connection), one it has not is run as is and
// prepared once the transaction is over (see prepare).
type txn struct {
	*sql.Tx
	s *Store
	// missed are the statements to prepare after the transaction.
	missed []string
	// conn is the connection the transaction runs on when it was begun on
	// one (a full read's reads beside, for Dialect.RawQuery), else nil.
	conn *sql.Conn
}

func (t *txn) prepared(ctx context.Context, q string) *sql.Stmt {
	if st := t.s.stmt(q); st != nil {
		return t.Tx.StmtContext(ctx, st)
	}
	if !t.s.d.SkipPrepare && !slices.Contains(t.missed, q) {
		t.missed = append(t.missed, q)
	}
	return nil
}

func (t *txn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := t.prepared(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, q, args...)
}

func (t *txn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := t.prepared(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, q, args...)
}

func (t *txn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := t.prepared(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, q, args...)
}

// pool runs single statements outside a transaction, prepared like a
// txn's; the goroutine holds no connection, so it prepares at once.
type pool struct{ s *Store }

func (p pool) statement(ctx context.Context, q string) *sql.Stmt {
	if p.s.d.SkipPrepare {
		return nil
	}
	if st := p.s.stmt(q); st != nil {
		return st
	}
	// On an error the statement runs as is: if the error is the
	// statement's, it shows there.
	st, _ := p.s.prepare(ctx, q)
	return st
}

func (p pool) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	done, err := p.s.write(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if st := p.statement(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.s.db.ExecContext(ctx, q, args...)
}

func (p pool) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := p.statement(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return p.s.db.QueryContext(ctx, q, args...)
}

func (p pool) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := p.statement(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.s.db.QueryRowContext(ctx, q, args...)
}
