package postgres

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
)

// rawQuery is the dialect's RawQuery: the query runs on pgx itself, and
// each row is decoded by pgx (Scan) or handed over as received
// (RawValues), without database/sql's conversion of every column into a
// driver value and then into the destination (the full configuration
// read's 50,000 keys took half the CPU this way). Text and bytea columns
// arrive as their bytes in the binary format pgx asks for; a bytea sent as
// text (a connection in simple protocol mode) is decoded from its hex form.
func rawQuery(ctx context.Context, dc any, query string, args []any, each func(sqlstore.RawRow) error) error {
	c, ok := dc.(*stdlib.Conn)
	if !ok {
		return fmt.Errorf("postgres: raw query on a %T connection", dc)
	}
	rows, err := c.Conn().Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	r := &rawRow{Rows: rows}
	for i, f := range rows.FieldDescriptions() {
		if f.DataTypeOID == pgtype.ByteaOID && f.Format == pgtype.TextFormatCode {
			r.hexCols = append(r.hexCols, i)
		}
	}
	for rows.Next() {
		if err := each(r); err != nil {
			return err
		}
	}
	return rows.Err()
}

// rawRow is the current row of a raw query.
type rawRow struct {
	pgx.Rows
	hexCols []int
	buf     []byte
}

func (r *rawRow) RawValues() [][]byte {
	vals := r.Rows.RawValues()
	if len(r.hexCols) == 0 {
		return vals
	}
	r.buf = r.buf[:0]
	for _, i := range r.hexCols {
		if vals[i] == nil {
			continue
		}
		at := len(r.buf)
		var err error
		if r.buf, err = unhex(r.buf, vals[i]); err != nil {
			vals[i] = nil // a hash that is not one: the key is left out
			continue
		}
		vals[i] = r.buf[at:]
	}
	return vals
}

// unhex decodes bytea's text form ("\x" and hex digits) onto dst.
func unhex(dst, v []byte) ([]byte, error) {
	if len(v) < 2 || v[0] != '\\' || v[1] != 'x' {
		return nil, fmt.Errorf("postgres: bytea text %.8q is not hex", v)
	}
	at := len(dst)
	dst = append(dst, make([]byte, hex.DecodedLen(len(v)-2))...)
	_, err := hex.Decode(dst[at:], v[2:])
	return dst, err
}
