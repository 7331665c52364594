package postgres

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
)

// rawQuery is the dialect's RawQuery: the query runs on pgx itself, and
// each row's values are handed over as received, without database/sql's
// per-column conversion into driver values and back (the full
// configuration read's 50,000 keys took half the CPU this way). Text and
// bytea columns arrive as their bytes in the binary format pgx asks for;
// a bytea sent as text (a connection in simple protocol mode) is decoded
// from its hex form.
func rawQuery(ctx context.Context, dc any, query string, args []any, row func(cols [][]byte) error) error {
	c, ok := dc.(*stdlib.Conn)
	if !ok {
		return fmt.Errorf("postgres: raw query on a %T connection", dc)
	}
	rows, err := c.Conn().Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var hexCols []int
	for i, f := range rows.FieldDescriptions() {
		if f.DataTypeOID == pgtype.ByteaOID && f.Format == pgtype.TextFormatCode {
			hexCols = append(hexCols, i)
		}
	}
	var buf []byte
	for rows.Next() {
		vals := rows.RawValues()
		for _, i := range hexCols {
			if vals[i] == nil {
				continue
			}
			if buf, err = unhex(buf[:0], vals[i]); err != nil {
				return err
			}
			vals[i] = buf
		}
		if err := row(vals); err != nil {
			return err
		}
	}
	return rows.Err()
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
