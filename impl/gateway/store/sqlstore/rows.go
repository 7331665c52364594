package sqlstore

import (
	"context"
	"database/sql"
	"slices"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// querier is a pool or a *txn: reads run alone or inside a transaction,
// prepared either way (stmts.go).
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// scanner is the row being read. A concrete type, not an interface with a
// Scan method: a call through an interface moves every row's argument
// list to the heap, one allocation a row of every read.
type scanner = *rowScanner

// rowScanner reads a row of database/sql's, or of the driver's own row
// reader (Dialect.RawQuery, a batch's BatchRows).
type rowScanner struct {
	rows *sql.Rows
	raw  interface{ Scan(dest ...any) error }
	// args holds the destinations handed to raw, so that the caller's
	// argument list stays on its stack (see scanner).
	args []any
	// times: raw decodes a NOT NULL time column into a *time.Time itself
	// (the dialect's RawQuery: pgx), rather than into a boxed value for
	// reqTime to take apart, one allocation a time (rawList).
	times bool
}

func (r *rowScanner) Scan(dest ...any) error {
	if r.raw == nil {
		return r.rows.Scan(dest...)
	}
	r.args = append(r.args[:0], dest...)
	if r.times {
		for i, d := range r.args {
			if t, ok := d.(reqTime); ok {
				r.args[i] = t.dst
			}
		}
	}
	err := r.raw.Scan(r.args...)
	clear(r.args)
	if r.times && err == nil {
		for _, d := range dest {
			if t, ok := d.(reqTime); ok {
				*t.dst = t.dst.UTC() // as reqTime stores it
			}
		}
	}
	return err
}

// scanFunc reads the current row into v; each table has one, next to its
// column list, so every read of the table decodes its rows alike.
type scanFunc[T any] func(r scanner, v *T) error

// list runs query (? placeholders, rebound for the dialect) and scans every
// row. No rows is an empty, non-nil slice: lists render as [] in JSON.
func list[T any](ctx context.Context, d *Dialect, q querier, scan scanFunc[T], query string, args ...any) ([]T, error) {
	return listSized(ctx, d, q, scan, 0, query, args...)
}

// listSized is list into a slice made for about n rows: growing a slice
// of tens of thousands of rows by appends copies it over and over (most
// of a full configuration read's CPU before the sizes were remembered).
func listSized[T any](ctx context.Context, d *Dialect, q querier, scan scanFunc[T], n int, query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, d.rebind(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]T, 0, n)
	var zero T
	sc := &rowScanner{rows: rows}
	for rows.Next() {
		// Scanned in place: a row variable handed to scan would escape,
		// one allocation per row.
		out = append(out, zero)
		if err := scan(sc, &out[len(out)-1]); err != nil {
			return nil, err
		}
	}
	return out, rows.Err()
}

// one is list for a query meant to match a single row: the first row, or
// store.ErrNotFound when none matched.
func one[T any](ctx context.Context, d *Dialect, q querier, scan scanFunc[T], query string, args ...any) (*T, error) {
	vs, err := list(ctx, d, q, scan, query, args...)
	if err != nil {
		return nil, err
	}
	if len(vs) == 0 {
		return nil, store.ErrNotFound
	}
	return &vs[0], nil
}

// arena copies short values of many rows into shared chunks: a full
// configuration read keeps a JSON column or two of each of its 20,000
// rows, one allocation each otherwise.
type arena struct{ buf []byte }

// Chunks start at arenaFirst and double up to arenaChunk; a longer value
// gets one of its own. Starting small matters: a get, a list or a delta
// scans with an arena of its own per row, and what it keeps pins the
// chunk for as long as the row lives (a delta's rows until the next full
// rebuild).
const (
	arenaFirst = 128
	arenaChunk = 16 << 10
)

// keep returns a copy of v (never nil: an empty value stays non-nil as
// json.RawMessage(v) would make it). The copy's capacity ends with it, so
// an append to it cannot reach the next value.
func (a *arena) keep(v string) []byte {
	if a.buf == nil || len(a.buf)+len(v) > cap(a.buf) {
		a.buf = make([]byte, 0, max(min(2*cap(a.buf), arenaChunk), arenaFirst, len(v)))
	}
	at := len(a.buf)
	a.buf = append(a.buf, v...)
	return a.buf[at:len(a.buf):len(a.buf)]
}

// table is how one kind of row is read: the SELECT up to its WHERE clause,
// the clause picking one live row by id, the ORDER BY of lists, the row
// scanner and, for a revisioned row, where its revision is.
type table[T any] struct {
	sel, byID, order string
	scan             scanFunc[T]
	revision         func(*T) int64
}

// list reads the rows matching where (a WHERE clause, or empty).
func (tb *table[T]) list(ctx context.Context, d *Dialect, q querier, where string, args ...any) ([]T, error) {
	return list(ctx, d, q, tb.scan, tb.sel+where+tb.order, args...)
}

// get reads one live row; store.ErrNotFound when there is none.
func (tb *table[T]) get(ctx context.Context, d *Dialect, q querier, id string) (*T, error) {
	return one(ctx, d, q, tb.scan, tb.sel+tb.byID+tb.order, id)
}

// reread reads back the row a change wrote, inside the change's
// transaction, and notes its new revision for the audit entry.
func (tb *table[T]) reread(ctx context.Context, d *Dialect, tx querier, ch *change, id string) (*T, error) {
	v, err := tb.get(ctx, d, tx, id)
	if err == nil {
		ch.revision = tb.revision(v)
	}
	return v, err
}

// sortRows sorts rows by cmp. It sorts their indexes and then moves each
// row once: configuration rows are 100-200 bytes, and sorting them in
// place copied them on every swap and every comparison (a seventh of a
// full configuration read at 10,000 principals).
func sortRows[T any](rows []T, cmp func(a, b *T) int) {
	sorted := true
	for i := 1; i < len(rows) && sorted; i++ {
		sorted = cmp(&rows[i-1], &rows[i]) <= 0
	}
	if sorted {
		return
	}
	idx := make([]int32, len(rows))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(i, j int32) int { return cmp(&rows[i], &rows[j]) })
	// Row k goes to position i where idx[i] == k: follow each cycle of
	// the permutation, marking done positions with -1.
	for start := range idx {
		if idx[start] < 0 || int(idx[start]) == start {
			continue
		}
		saved := rows[start]
		at := start
		for {
			from := int(idx[at])
			idx[at] = -1
			if from == start {
				rows[at] = saved
				break
			}
			rows[at] = rows[from]
			at = from
		}
	}
}
