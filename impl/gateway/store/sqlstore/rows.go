package sqlstore

import (
	"context"
	"database/sql"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// querier is a *sql.DB or a *sql.Tx: reads run alone or inside a transaction.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// scanner is the row being read (*sql.Rows).
type scanner interface {
	Scan(dest ...any) error
}

// scanFunc reads the current row into v; each table has one, next to its
// column list, so every read of the table decodes its rows alike.
type scanFunc[T any] func(r scanner, v *T) error

// list runs query (? placeholders, rebound for the dialect) and scans every
// row. No rows is an empty, non-nil slice: lists render as [] in JSON.
func list[T any](ctx context.Context, d *Dialect, q querier, scan scanFunc[T], query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, d.rebind(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			return nil, err
		}
		out = append(out, v)
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
