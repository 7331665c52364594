package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
)

// A joined read returns a table's rows as one row of joined values
// (group_concat), which the table's own scanner then reads a row at a
// time from the joined values. SQLite's driver takes its connection's
// mutex a few times on every column of every row and makes a driver value
// of each: at scale (10,000 principals and chain entries,
// 50,000 keys) a full read spent more CPU there than in SQLite itself.
// Joined, a table costs one row of a few columns.
//
// Values are joined by joinSep. A stored value holding it (ids and names
// are anything a client sent; JSON escapes control characters) shows as
// a count mismatch, as does any value missing, and the rows are read one
// by one instead; so is any value that does not decode as the row read
// would (listJoined). Both reads return the same rows.

// joinSep joins values: the ASCII unit separator, which no generated id
// holds.
const joinSep = "\x1f"

// joinKind is how a column is joined and decoded.
type joinKind uint8

const (
	joinText joinKind = iota // NOT NULL text
	joinInt                  // NOT NULL integer: its decimal text
	// joinNull may be NULL: joined as "" for NULL and "v" and the value
	// otherwise (group_concat and concat_ws skip NULLs).
	joinNull
)

// joinSpec is how one table is read joined: its columns in the order its
// scanner takes them, the text ones joined per row by concat_ws (or each
// alone, split), and at most one last column of blobs of blobSize bytes,
// concatenated. The counted columns are counted apart: not NULL by the
// schema's word alone (SQLite lets a PRIMARY KEY that is not an INTEGER
// be NULL), they must be by the count.
type joinSpec struct {
	from     string // the table, and any condition ("WHERE …")
	cols     []string
	kinds    []joinKind
	split    bool
	blob     string
	blobSize int
	counted  []string

	query  string
	groups [][]int // the text columns of each joined value
}

// newJoinSpec describes table from: cols as a table's column list ("a,
// b, c"), ints and nulls the names of its integer and nullable columns,
// counted those of the others the schema does not declare NOT NULL
// (TestJoinSpecsMatchSchema).
func newJoinSpec(from, cols, ints, nulls, counted string, split bool, blob string, blobSize int) *joinSpec {
	sp := &joinSpec{from: from, split: split, blob: blob, blobSize: blobSize, counted: strings.Fields(counted)}
	for _, c := range strings.Split(cols, ",") {
		c = strings.TrimSpace(c)
		k := joinText
		switch {
		case contains(ints, c):
			k = joinInt
		case contains(nulls, c):
			k = joinNull
		}
		sp.cols = append(sp.cols, c)
		sp.kinds = append(sp.kinds, k)
	}
	var b strings.Builder
	b.WriteString("SELECT count(*)")
	for _, c := range sp.counted {
		fmt.Fprintf(&b, ", count(%s)", c)
	}
	exprs := make([]string, len(sp.cols))
	for i, c := range sp.cols {
		exprs[i] = c
		if sp.kinds[i] == joinNull {
			exprs[i] = "ifnull('v' || " + c + ", '')"
		}
	}
	if split {
		for i, e := range exprs {
			sp.groups = append(sp.groups, []int{i})
			fmt.Fprintf(&b, ", group_concat(%s, char(31))", e)
		}
	} else {
		all := make([]int, len(exprs))
		for i := range all {
			all[i] = i
		}
		sp.groups = [][]int{all}
		fmt.Fprintf(&b, ", group_concat(concat_ws(char(31), %s), char(31))", strings.Join(exprs, ", "))
	}
	if blob != "" {
		fmt.Fprintf(&b, ", count(length(%[1]s) = %[2]d OR NULL), group_concat(%[1]s, '')", blob, blobSize)
	}
	b.WriteString(" FROM " + from + " ")
	sp.query = b.String()
	return sp
}

func contains(names, c string) bool {
	for _, n := range strings.Fields(names) {
		if n == c {
			return true
		}
	}
	return false
}

// joinedUsed counts the joined reads used (tests).
var joinedUsed atomic.Int64

// listJoined reads the rows of sp matching where ("AND …" or "WHERE …",
// following sp.from) joined, and decodes each with scan into a slice with
// room for at least n. ok is false when they do not split into the
// counted rows or a row does not decode: the caller then reads rows (an
// error of the joined query itself is returned).
func listJoined[T any](ctx context.Context, d *Dialect, q querier, sp *joinSpec, scan scanFunc[T], n int, where string, args ...any) (out []T, ok bool, err error) {
	rows, err := q.QueryContext(ctx, d.rebind(sp.query+where), args...)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var count int
	counted := make([]int, len(sp.counted))
	texts := make([]sql.NullString, len(sp.groups))
	var blobOK int
	var blob sql.RawBytes
	dest := make([]any, 0, len(counted)+len(texts)+3)
	dest = append(dest, &count)
	for i := range counted {
		dest = append(dest, &counted[i])
	}
	for i := range texts {
		dest = append(dest, &texts[i])
	}
	if sp.blob != "" {
		dest = append(dest, &blobOK, &blob)
	}
	if !rows.Next() {
		return nil, false, rows.Err()
	}
	if err := rows.Scan(dest...); err != nil {
		return nil, false, err
	}
	out = make([]T, 0, max(n, count))
	if count == 0 {
		joinedUsed.Add(1)
		return out, true, rows.Close()
	}
	for _, c := range counted {
		if c != count {
			return nil, false, rows.Close()
		}
	}
	r := &joinedRow{sp: sp, rest: make([]string, len(texts)), vals: make([]string, len(sp.cols)), null: make([]bool, len(sp.cols))}
	for g, t := range texts {
		if strings.Count(t.String, joinSep) != count*len(sp.groups[g])-1 {
			return nil, false, rows.Close()
		}
		r.rest[g] = t.String
	}
	if sp.blob != "" {
		if blobOK != count || len(blob) != count*sp.blobSize {
			return nil, false, rows.Close()
		}
		r.blob = blob
	}
	sc := &rowScanner{raw: r}
	var zero T
	for range count {
		r.next()
		out = append(out, zero)
		if err := scan(sc, &out[len(out)-1]); err != nil {
			// The row read decodes it, or says why not.
			return nil, false, rows.Close()
		}
	}
	joinedUsed.Add(1)
	// The blob (sql.RawBytes) is the driver's until here: scan copied
	// what it keeps.
	return out, true, rows.Close()
}

// joinedRow is the current row of a joined read.
type joinedRow struct {
	sp   *joinSpec
	rest []string // what is left of each joined value
	vals []string // the row's values by column
	null []bool
	blob []byte // the blobs left, the current one first
	cur  []byte
}

// next moves to the next row; listJoined counted them.
func (r *joinedRow) next() {
	for g, cols := range r.sp.groups {
		rest := r.rest[g]
		for _, c := range cols {
			v := rest
			if i := strings.IndexByte(rest, joinSep[0]); i >= 0 {
				v, rest = rest[:i], rest[i+1:]
			} else {
				rest = ""
			}
			r.null[c] = false
			if r.sp.kinds[c] == joinNull {
				if r.null[c] = v == ""; !r.null[c] {
					v = v[1:]
				}
			}
			r.vals[c] = v
		}
		r.rest[g] = rest
	}
	if r.sp.blob != "" {
		n := r.sp.blobSize
		r.cur, r.blob = r.blob[:n:n], r.blob[n:]
	}
}

var errJoinedDest = errors.New("joined read: a destination the row read would decode otherwise")

// Scan stores the row's values as database/sql's Scan would store the
// driver's: text and integers for the destinations the full read's
// scanners use. Anything else is an error, and the rows are read one by
// one.
func (r *joinedRow) Scan(dest ...any) error {
	want := len(r.vals)
	if r.sp.blob != "" {
		want++
	}
	if len(dest) != want {
		return fmt.Errorf("joined read: %d destinations for %d columns", len(dest), want)
	}
	for i, d := range dest {
		if i == len(r.vals) {
			raw, ok := d.(*sql.RawBytes)
			if !ok {
				return errJoinedDest
			}
			*raw = r.cur
			continue
		}
		v, null, isInt := r.vals[i], r.null[i], r.sp.kinds[i] == joinInt
		switch d := d.(type) {
		case *string:
			if null {
				return errJoinedDest
			}
			*d = v
		case *sql.NullString:
			*d = sql.NullString{String: v, Valid: !null}
		case *int64:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || null {
				return errJoinedDest
			}
			*d = n
		case *int:
			n, err := strconv.Atoi(v)
			if err != nil || null {
				return errJoinedDest
			}
			*d = n
		case *bool:
			// As an integer column reads into a bool: 1 or 0.
			if null || v != "0" && v != "1" {
				return errJoinedDest
			}
			*d = v == "1"
		case sql.Scanner:
			var err error
			switch {
			case null:
				err = d.Scan(nil)
			case isInt:
				n, perr := strconv.ParseInt(v, 10, 64)
				if perr != nil {
					return errJoinedDest
				}
				err = d.Scan(n)
			default:
				err = d.Scan(v)
			}
			if err != nil {
				return err
			}
		default:
			return errJoinedDest
		}
	}
	return nil
}
