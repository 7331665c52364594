package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Store implements store.Store over database/sql.
type Store struct {
	db   *sql.DB
	pool pool // runs statements on db, prepared (stmts.go)
	d    *Dialect
	// Base's clock stamps the rows written (nowT); its logger is unused.
	service.Base

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // by key or query text; guarded by stmtMu; see prepared

	// loaded are the row counts of the last full configuration read: the
	// next one sizes its slices from them (listSized).
	loaded atomic.Pointer[configSizes]
	// besideMu is held by the full configuration read running reads in
	// transactions of their own (beside): one at a time, so reads waiting
	// for more connections cannot fill the pool between them.
	besideMu sync.Mutex
	// writer holds the one write in flight when the dialect is OneWriter
	// (nil otherwise); its waiters queue in arrival order.
	writer chan struct{}
}

var _ store.Store = (*Store)(nil)

// New wraps an open, migrated database.
func New(db *sql.DB, d *Dialect, o service.Options) *Store {
	s := service.Init(o, &Store{db: db, d: d})
	s.pool = pool{s}
	if d.OneWriter {
		s.writer = make(chan struct{}, 1)
	}
	return s
}

// write waits for the store's turn to write (Dialect.OneWriter) and
// returns what ends it; with several writers allowed it returns at once.
func (s *Store) write(ctx context.Context) (done func(), err error) {
	if s.writer == nil {
		return func() {}, nil
	}
	select {
	case s.writer <- struct{}{}:
		return func() { <-s.writer }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// DB exposes the handle (the scheduler shares the database).
func (s *Store) DB() *sql.DB { return s.db }

func (s *Store) Driver() string { return s.d.Name }

func (s *Store) Close() error { return s.db.Close() }

// prepared is the statement named key, query(key) with '?' placeholders,
// prepared once for the life of the store (stmts.go). It may wait for a
// free connection, so the caller must not be inside a transaction; the
// lock is not held meanwhile, since transactions look statements up under it.
// A bound above zero caps the statements kept: past it the answer is nil
// and no error (run the text unprepared).
func (s *Store) prepared(ctx context.Context, key string, query func() string, bound int) (*sql.Stmt, error) {
	s.stmtMu.Lock()
	st, ok := s.stmts[key]
	s.stmtMu.Unlock()
	if ok {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, s.d.rebind(query()))
	if err != nil {
		return nil, err
	}
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	if prev, ok := s.stmts[key]; ok {
		st.Close() // prepared twice at once: keep the first
		return prev, nil
	}
	if bound > 0 && len(s.stmts) >= bound {
		// Others filled the cache while this one was prepared.
		st.Close()
		return nil, nil
	}
	if s.stmts == nil {
		s.stmts = map[string]*sql.Stmt{}
	}
	s.stmts[key] = st
	return st, nil
}

func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT 1").Scan(&n); err != nil {
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	return nil
}

// change describes a configuration change for the audit log. The function
// run by tx fills in the resulting revision, or marks the change as none
// when it turned out to change nothing (an idempotent repeat).
type change struct {
	action, kind, id string
	revision         int64 // 0: the resource has no revision (or is gone)
	none             bool
	// touched are the resources the change wrote, for the change log
	// (config_changes); none recorded logs "*": readers rebuild in full.
	touched []touch
}

// touch names one resource in the change log: kind is changeUpstream,
// changePrincipal (its keys and chain entries included) or changeRegistry;
// id "*" means every resource of the kind.
type touch struct{ kind, id string }

const (
	changeUpstream  = "upstream"
	changePrincipal = "principal"
	changeRegistry  = "registry"
	changeAll       = "*"
)

func audit(action, kind, id string) *change { return &change{action: action, kind: kind, id: id} }

// touch records that the change wrote resource id of kind.
func (c *change) touch(kind, id string) { c.touched = append(c.touched, touch{kind, id}) }

// changeLogRetention is how many generations of the change log are kept:
// a replica further behind than that loads in full.
const changeLogRetention = 10000

// snapshot reads see one consistent state across several statements:
// PostgreSQL's default READ COMMITTED takes a new snapshot per statement,
// and a read-only SQLite transaction starts deferred, so it takes no write
// lock and still reads one WAL snapshot.
var snapshot = &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true}

// read runs fn in one snapshot transaction.
func (s *Store) read(ctx context.Context, fn func(*txn) error) error {
	tx, err := s.begin(ctx, snapshot, false)
	if err != nil {
		return s.d.classify(err)
	}
	defer s.end(ctx, tx)
	if err := fn(tx); err != nil {
		return s.d.classify(err)
	}
	return s.d.classify(tx.Commit())
}

// tx runs fn in a transaction. A configuration change (ch != nil) also
// bumps the config generation, appends an audit row and notifies, all in
// the same transaction: no change is visible without its audit entry.
func (s *Store) tx(ctx context.Context, ch *change, fn func(*txn) error) error {
	done, err := s.write(ctx)
	if err != nil {
		return s.d.classify(err)
	}
	defer done()
	tx, err := s.begin(ctx, nil, false)
	if err != nil {
		return s.d.classify(err)
	}
	defer s.end(ctx, tx)
	if err := fn(tx); err != nil {
		return s.d.classify(err)
	}
	if ch != nil && !ch.none {
		if err := s.record(ctx, tx, ch); err != nil {
			return s.d.classify(err)
		}
	}
	return s.d.classify(tx.Commit())
}

// begin starts a transaction whose statements run prepared (stmts.go);
// s.end ends it. With ownConn it runs on a connection taken for it and
// kept in txn.conn, which the dialect's native reader (Dialect.RawQuery)
// needs to reach.
func (s *Store) begin(ctx context.Context, opts *sql.TxOptions, ownConn bool) (*txn, error) {
	if !ownConn {
		sqlTx, err := s.db.BeginTx(ctx, opts)
		if err != nil {
			return nil, err
		}
		return &txn{Tx: sqlTx, s: s}, nil
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	sqlTx, err := conn.BeginTx(ctx, opts)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &txn{Tx: sqlTx, s: s, conn: conn}, nil
}

// end rolls tx back unless it committed and gives its connection back,
// then prepares what it ran unprepared, now that the connection is free.
func (s *Store) end(ctx context.Context, tx *txn) {
	tx.Rollback()
	if tx.conn != nil {
		tx.conn.Close()
	}
	if len(tx.missed) > 0 && ctx.Err() == nil {
		s.prepareAll(ctx, tx.missed)
	}
}

func (s *Store) exec(ctx context.Context, tx *txn, q string, args ...any) (int64, error) {
	res, err := tx.ExecContext(ctx, s.d.rebind(q), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s *Store) nowT() time.Time { return s.Clock.Now().UTC().Truncate(time.Second) }

// checkRevision distinguishes a missing row from a stale revision after an
// optimistic update touched no row.
func (s *Store) checkRevision(ctx context.Context, tx *txn, table, revCol, live, id string) error {
	var rev int64
	err := tx.QueryRowContext(ctx, s.d.rebind("SELECT "+revCol+" FROM "+table+" WHERE id = ?"+live), id).Scan(&rev)
	if errors.Is(err, sql.ErrNoRows) {
		return store.ErrNotFound
	}
	if err != nil {
		return err
	}
	return store.ErrStaleRevision
}

// optimistic applies set to one row when its revision matches expect (or
// expect is AnyRevision), incrementing the revision and the updated time in
// the same statement; a miss is told apart as not found or stale.
func (s *Store) optimistic(ctx context.Context, tx *txn, table, revCol, live, id string, expect int64, set string, args []any) error {
	all := append(append([]any{}, args...), s.d.t(s.nowT()), id, expect, expect)
	n, err := s.exec(ctx, tx, "UPDATE "+table+" SET "+set+", "+revCol+" = "+revCol+" + 1, updated_at = ? "+
		"WHERE id = ?"+live+" AND (? = 0 OR "+revCol+" = ?)", all...)
	if err != nil {
		return err
	}
	if n == 0 {
		return s.checkRevision(ctx, tx, table, revCol, live, id)
	}
	return nil
}
