package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// The full configuration read's keys, most of its rows (50,000 at issue
// 22's size). Read a row at a time through database/sql they cost about
// 800 ns each on SQLite: seven allocations a row (the driver's values,
// their boxes, Scan's arguments) and a dozen driver calls that each take
// the connection's mutex. So:
//   - a dialect with a native row reader (Dialect.RawQuery: pgx) reads
//     them through it, without database/sql's per-column conversion;
//   - SQLite reads them joined (joined.go, keyJoin): the ids of all
//     come in one string, the hashes in one array;
//   - a dialect naming a row id (SQLite) reads them in two halves, each
//     on a connection of its own (LoadConfig).

// keyJoin reads liveKeysQuery's columns joined, each alone (a row of two
// ids costs less as two joined values than as one).
var keyJoin = newJoinSpec("principal_keys WHERE revoked_at IS NULL", "id, principal_id", "", "", "id", true, "hash", sha256.Size)

// fullKeys reads the live keys matching where ("AND …", or empty) for a
// full configuration read, about n of them, into a slice with room for at
// least n.
func (s *Store) fullKeys(ctx context.Context, q querier, n int, where string, args ...any) ([]store.Key, error) {
	if tx, ok := q.(*txn); ok && tx.conn != nil && s.d.RawQuery != nil {
		return s.rawKeys(ctx, tx.conn, n, where, args...)
	}
	if s.d.JoinRows {
		if ks, ok, err := listJoined(ctx, s.d, q, keyJoin, keyScanner(n), n, where, args...); err != nil || ok {
			return ks, err
		}
	}
	return s.liveKeys(ctx, q, n, where, args...)
}

// rawKeys reads the keys through the dialect's native row reader on the
// connection of the read transaction (conn), which the reader runs the
// query in. The hashes share backing arrays of many keys each, and the
// ids and principal ids of each batch of keys one string (two
// allocations a key were a tenth of a full read's CPU on PostgreSQL).
func (s *Store) rawKeys(ctx context.Context, conn *sql.Conn, n int, where string, args ...any) ([]store.Key, error) {
	out := make([]store.Key, 0, n)
	hashes := hashArena{n: n}
	var ids idBatch
	err := conn.Raw(func(dc any) error {
		return s.d.RawQuery(ctx, dc, s.d.rebind(liveKeysQuery+where), args, func(row RawRow) error {
			cols := row.RawValues()
			if len(cols) != 3 {
				return errKeyColumns
			}
			out = append(out, store.Key{Hash: hashes.keep(cols[2])})
			ids.add(out, cols[0], cols[1])
			return nil
		})
	})
	ids.flush(out)
	return out, err
}

// idBatch holds the ids and principal ids of the last keys read until
// flush makes them one string, the keys' ids slices of it.
type idBatch struct {
	buf  []byte
	ends []int // of each key's id, then of its principal id
	from int   // the batch's first key
}

// idBatchKeys keys share a string: a key kept pins no more than that.
const idBatchKeys = 1024

// add takes the ids of keys' last key.
func (b *idBatch) add(keys []store.Key, id, pid []byte) {
	b.buf = append(b.buf, id...)
	b.ends = append(b.ends, len(b.buf))
	b.buf = append(b.buf, pid...)
	b.ends = append(b.ends, len(b.buf))
	if len(keys)-b.from == idBatchKeys {
		b.flush(keys)
	}
}

// flush sets the ids of the keys added since the last flush.
func (b *idBatch) flush(keys []store.Key) {
	all, at := string(b.buf), 0
	for i := b.from; i < len(keys); i++ {
		e := b.ends[2*(i-b.from):]
		keys[i].ID, keys[i].PrincipalID = all[at:e[0]], all[e[0]:e[1]]
		at = e[1]
	}
	b.buf, b.ends, b.from = b.buf[:0], b.ends[:0], len(keys)
}

var errKeyColumns = errors.New("key read: not 3 columns")

// rawList is listSized through the dialect's native row reader on conn,
// the connection of the read transaction: the same scanner decodes the
// rows, through RawRow.Scan.
func rawList[T any](ctx context.Context, s *Store, conn *sql.Conn, scan scanFunc[T], n int, query string, args ...any) ([]T, error) {
	out := make([]T, 0, n)
	var zero T
	sc := &rowScanner{times: true}
	err := conn.Raw(func(dc any) error {
		return s.d.RawQuery(ctx, dc, s.d.rebind(query), args, func(row RawRow) error {
			sc.raw = row
			out = append(out, zero)
			return scan(sc, &out[len(out)-1])
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// fullList is listSized of the rows of sel (a SELECT up to its WHERE
// clause) matching where, for a full configuration read: through the
// native row reader where the dialect has one and q is a transaction on a
// connection of its own, else joined by sp where the dialect joins rows
// and sp is not nil.
func fullList[T any](ctx context.Context, s *Store, q querier, sp *joinSpec, scan scanFunc[T], n int, sel, where string, args ...any) ([]T, error) {
	if tx, ok := q.(*txn); ok && tx.conn != nil && s.d.RawQuery != nil {
		return rawList(ctx, s, tx.conn, scan, n, sel+where, args...)
	}
	if sp != nil && s.d.JoinRows {
		if out, ok, err := listJoined(ctx, s.d, q, sp, scan, n, where, args...); err != nil || ok {
			return out, err
		}
	}
	return listSized(ctx, s.d, q, scan, n, sel+where, args...)
}
