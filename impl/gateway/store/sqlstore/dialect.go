// Package sqlstore implements store.Store once over database/sql. A small
// Dialect carries what differs between SQLite and PostgreSQL: placeholders,
// time columns (unix seconds versus timestamptz), error classification and
// the change notification.
package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// RawRow is a row of a dialect's native row reader (Dialect.RawQuery).
type RawRow interface {
	// Scan decodes the row into dest as *sql.Rows.Scan does, for the
	// destinations the full read's scanners use, and a NOT NULL time
	// column into a *time.Time (in any location).
	Scan(dest ...any) error
	// RawValues are the row's column values as the driver received them
	// (text and bytea: their bytes; nil for NULL).
	RawValues() [][]byte
}

// Dialect describes one database.
type Dialect struct {
	Name string
	// Numbered turns '?' placeholders into $1, $2, ….
	Numbered bool
	// UnixTime stores times as integer unix seconds instead of timestamps.
	UnixTime bool
	// IsUnique reports a unique-constraint violation.
	IsUnique func(error) bool
	// IsForeignKey reports a foreign-key violation (a parent row vanished).
	IsForeignKey func(error) bool
	// IsUnavailable reports that the database cannot be reached.
	IsUnavailable func(error) bool
	// ForShare is the clause that share-locks the rows a SELECT reads, or
	// empty where transactions are serialised anyway (SQLite).
	ForShare string
	// ForUpdate write-locks the rows a SELECT reads, or is empty (SQLite
	// transactions already hold the write lock).
	ForUpdate string
	// HourBucket is the SQL expression truncating request_events.at to its hour.
	HourBucket string
	// SkipPrepare leaves statements unprepared by the store (stmts.go):
	// the driver keeps its own per-connection cache of prepared
	// statements (pgx's default).
	SkipPrepare bool
	// ReadBatch, when set, runs qs in one snapshot transaction (repeatable
	// read, read-only) sent as one round trip, and hands each statement's
	// rows to its Read in order. The delta read every replica runs on
	// every change uses it (deltabatch.go). An error wrapping
	// errors.ErrUnsupported (a connection it cannot batch on) has the
	// store read one statement at a time instead.
	ReadBatch func(ctx context.Context, db *sql.DB, qs []BatchQuery) error
	// NotifyChannel, when set, is the channel every configuration change
	// announces its new generation on (PostgreSQL NOTIFY). Such a database
	// records a change in one statement (a data-modifying WITH): audit
	// row, generation bump, change log and notification in one round trip
	// instead of four.
	NotifyChannel string
	// ExportSnapshot, when set, is the query returning the name of the
	// snapshot of the read transaction it runs in, and ImportSnapshot the
	// statement (with %s for the name) making another read transaction
	// see that same snapshot: a full configuration read then reads on two
	// connections at once (LoadConfig).
	ExportSnapshot, ImportSnapshot string
	// RawQuery, when set, runs query with args on dc, the driver's own
	// connection (database/sql's Conn.Raw), inside the transaction open on
	// it, and calls row with each row (valid only during the call). The
	// full configuration read reads its largest tables through it:
	// database/sql's per-column conversion was twice the driver's cost.
	RawQuery func(ctx context.Context, dc any, query string, args []any, row func(RawRow) error) error
	// JoinRows reads the full configuration's keys, principals and chain
	// entries as one row of joined values (group_concat) a table, rather
	// than a row a key (joined.go).
	JoinRows bool
	// RowID, when set, is the column numbering a table's rows in storage
	// order (SQLite's rowid): the full read splits its key read in two
	// halves by it, each on a connection of its own.
	RowID string
	// OneWriter queues the store's own writes in order before they ask the
	// database for its lock (SQLite: one writer at a time). SQLite's busy
	// handler polls with growing sleeps and favours the connection that
	// just committed, which starts its next write at once, so under slow
	// commits a waiting writer gave up after the busy timeout while others
	// kept winning. The busy timeout is then only for writers outside the
	// store (the scheduler's, another process's).
	OneWriter bool
}

func (d *Dialect) rebind(q string) string {
	if !d.Numbered {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// t encodes a time for a query parameter.
func (d *Dialect) t(v time.Time) any {
	if d.UnixTime {
		return v.Unix()
	}
	return v.UTC().Truncate(time.Microsecond)
}

// tp encodes an optional time.
func (d *Dialect) tp(v *time.Time) any {
	if v == nil {
		return nil
	}
	return d.t(*v)
}

// timeCol scans either representation into a *time.Time (nil for NULL).
type timeCol struct{ dst **time.Time }

func (c timeCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c.dst = nil
	case int64:
		t := time.Unix(v, 0).UTC()
		*c.dst = &t
	case time.Time:
		t := v.UTC()
		*c.dst = &t
	case []byte:
		return c.Scan(string(v))
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return c.Scan(n)
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return fmt.Errorf("time column: %w", err)
		}
		return c.Scan(t)
	default:
		return fmt.Errorf("time column: unsupported %T", src)
	}
	return nil
}

// reqTime scans a NOT NULL time. It decodes in place rather than through
// timeCol, whose result pointer would be one more allocation per row of a
// full configuration read.
type reqTime struct{ dst *time.Time }

func (c reqTime) Scan(src any) error {
	switch v := src.(type) {
	case nil:
	case int64:
		*c.dst = time.Unix(v, 0).UTC()
	case time.Time:
		*c.dst = v.UTC()
	default:
		var p *time.Time
		if err := (timeCol{&p}).Scan(src); err != nil {
			return err
		}
		if p != nil {
			*c.dst = *p
		}
	}
	return nil
}

// classify maps driver errors onto the store's sentinels.
func (d *Dialect) classify(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrStaleRevision),
		errors.Is(err, store.ErrReferenced), errors.Is(err, store.ErrUnavailable):
		return err
	case d.IsUnique != nil && d.IsUnique(err):
		return fmt.Errorf("%w: %v", store.ErrConflict, err)
	case unavailable(err) || (d.IsUnavailable != nil && d.IsUnavailable(err)):
		return fmt.Errorf("%w: %v", store.ErrUnavailable, err)
	}
	return err
}

func unavailable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return true
	}
	msg := err.Error()
	// Messages of a connection lost mid-statement; pgx reports a connection
	// the server closed under it as "conn closed".
	for _, s := range []string{"connection refused", "sql: database is closed", "no such host", "broken pipe",
		"connection reset", "unexpected EOF", "closed pool", "the database system is shutting down",
		"the database system is starting up", "the database system is in recovery mode", "terminating connection",
		"conn closed", "server closed the connection", "i/o timeout"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
