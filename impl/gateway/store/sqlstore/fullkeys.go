package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// The full configuration read's keys, most of its rows (50,000 at issue
// 22's size). Read a row at a time through database/sql they cost about
// 800 ns each on SQLite: seven allocations a row (the driver's values,
// their boxes, Scan's arguments) and a dozen driver calls that each take
// the connection's mutex. So:
//   - a dialect with a native row reader (Dialect.RawQuery: pgx) reads
//     them through it, without database/sql's per-column conversion;
//   - SQLite reads them as one row of joined values (keysJoined) and
//     splits them here: the ids share one string, the hashes one array;
//   - a dialect naming a row id (SQLite) reads them in two halves, each
//     on a connection of its own (LoadConfig).

// keySep joins ids in keysJoined: the ASCII unit separator, which no
// generated id holds. A stored id holding it shows as a count mismatch and
// the keys are read a row at a time instead.
const keySep = "\x1f"

// fullKeys reads the live keys matching where ("AND …", or empty) for a
// full configuration read, about n of them.
func (s *Store) fullKeys(ctx context.Context, q querier, n int, where string, args ...any) ([]store.Key, error) {
	if tx, ok := q.(*txn); ok && tx.conn != nil && s.d.RawQuery != nil {
		return s.rawKeys(ctx, tx.conn, n, where, args...)
	}
	if s.d.JoinKeys {
		if ks, ok, err := s.keysJoined(ctx, q, where, args...); err != nil || ok {
			return ks, err
		}
	}
	return s.liveKeys(ctx, q, n, where, args...)
}

// keysJoined reads the keys in one row: their count, ids and principal
// ids each joined by keySep, and the hashes concatenated. ok is false when
// the values do not split into count keys of 32-byte hashes (every hash
// 32 bytes long: a short one and a long one would add up, and shift every
// hash between them); the caller then reads rows.
func (s *Store) keysJoined(ctx context.Context, q querier, where string, args ...any) (keys []store.Key, ok bool, err error) {
	rows, err := q.QueryContext(ctx, s.d.rebind("SELECT count(*), group_concat(id, char(31)), group_concat(principal_id, char(31)), group_concat(hash, ''), min(length(hash)), max(length(hash)) "+
		"FROM principal_keys WHERE revoked_at IS NULL "+where), args...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var n int
	var ids, pids sql.NullString
	var hashes sql.RawBytes
	var shortest, longest sql.NullInt64
	if !rows.Next() {
		return nil, false, rows.Err()
	}
	if err := rows.Scan(&n, &ids, &pids, &hashes, &shortest, &longest); err != nil {
		return nil, false, err
	}
	if n == 0 {
		return []store.Key{}, true, rows.Close()
	}
	if shortest.Int64 != sha256.Size || longest.Int64 != sha256.Size || len(hashes) != n*sha256.Size || strings.Count(ids.String, keySep) != n-1 || strings.Count(pids.String, keySep) != n-1 {
		return nil, false, rows.Close()
	}
	// RawBytes is the driver's until the rows close: one copy for all.
	hs := make([]byte, len(hashes))
	copy(hs, hashes)
	keys = make([]store.Key, n)
	idRest, pidRest := ids.String, pids.String
	for i := range keys {
		k := &keys[i]
		k.ID, idRest = cut(idRest)
		k.PrincipalID, pidRest = cut(pidRest)
		k.Hash = hs[i*sha256.Size : (i+1)*sha256.Size : (i+1)*sha256.Size]
	}
	return keys, true, rows.Close()
}

// cut returns what s holds up to the first keySep, and the rest after it.
func cut(s string) (string, string) {
	if i := strings.IndexByte(s, keySep[0]); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// rawKeys reads the keys through the dialect's native row reader on the
// connection of the read transaction (conn), which the reader runs the
// query in. The hashes share backing arrays of many keys each.
func (s *Store) rawKeys(ctx context.Context, conn *sql.Conn, n int, where string, args ...any) ([]store.Key, error) {
	out := make([]store.Key, 0, n)
	hashes := hashArena{n: n}
	err := conn.Raw(func(dc any) error {
		return s.d.RawQuery(ctx, dc, s.d.rebind(liveKeysQuery+where), args, func(row RawRow) error {
			cols := row.RawValues()
			if len(cols) != 3 {
				return errKeyColumns
			}
			out = append(out, store.Key{ID: string(cols[0]), PrincipalID: string(cols[1]), Hash: hashes.keep(cols[2])})
			return nil
		})
	})
	return out, err
}

var errKeyColumns = errors.New("key read: not 3 columns")

// rawList is listSized through the dialect's native row reader on conn,
// the connection of the read transaction: the same scanner decodes the
// rows, through RawRow.Scan.
func rawList[T any](ctx context.Context, s *Store, conn *sql.Conn, scan scanFunc[T], n int, query string, args ...any) ([]T, error) {
	out := make([]T, 0, n)
	var zero T
	sc := &rowScanner{}
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

// fullList is listSized for a full configuration read: through the
// native row reader where the dialect has one and q is a transaction on a
// connection of its own.
func fullList[T any](ctx context.Context, s *Store, q querier, scan scanFunc[T], n int, query string, args ...any) ([]T, error) {
	if tx, ok := q.(*txn); ok && tx.conn != nil && s.d.RawQuery != nil {
		return rawList(ctx, s, tx.conn, scan, n, query, args...)
	}
	return listSized(ctx, s.d, q, scan, n, query, args...)
}
