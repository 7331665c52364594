package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

var _ store.EventReader = (*Store)(nil)

// SearchRequestEvents implements store.EventReader. The keyset condition
// (at, id) < (after.at, after.id) keeps pages stable while new events
// arrive: a new event is always newer than any cursor.
func (s *Store) SearchRequestEvents(ctx context.Context, q store.EventQuery) ([]store.RequestEvent, error) {
	if q.Limit <= 0 || q.Limit > 1000 {
		q.Limit = 100
	}
	var where []string
	var args []any
	add := func(cond string, a ...any) {
		where = append(where, cond)
		args = append(args, a...)
	}
	if q.PrincipalID != "" {
		add("principal_id = ?", q.PrincipalID)
	}
	if q.Model != "" {
		add("model = ?", q.Model)
	}
	if q.StatusMin > 0 {
		add("status >= ?", q.StatusMin)
	}
	if q.StatusMax > 0 {
		add("status <= ?", q.StatusMax)
	}
	if !q.Since.IsZero() {
		add("at >= ?", s.d.t(q.Since))
	}
	if !q.Until.IsZero() {
		add("at < ?", s.d.t(q.Until))
	}
	if q.After != nil {
		at := s.d.t(q.After.At)
		add("(at < ? OR (at = ? AND id < ?))", at, at, q.After.ID)
	}
	cond := ""
	if len(where) > 0 {
		cond = "WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, q.Limit)
	return s.queryRequestEvents(ctx, cond, args...)
}

// eventSums sums request events into the columns of rollupCols' order.
const eventSums = `COUNT(*), SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), SUM(input_tokens), SUM(output_tokens),
	SUM(cache_creation_input_tokens), SUM(cache_creation_1h_input_tokens), SUM(cache_read_input_tokens),
	COALESCE(SUM(cost_nanos), 0), SUM(CASE WHEN cost_nanos IS NULL THEN 1 ELSE 0 END)`

// rollupCols are a rollup's counters, as UsageCounts orders them.
const rollupCols = `requests, errors, input_tokens, output_tokens, cache_creation_input_tokens, cache_creation_1h_input_tokens,
	cache_read_input_tokens, cost_nanos, unpriced_requests`

// AggregateRequestEvents implements store.EventReader with the same grouping
// as RollupUsage, without writing anything.
func (s *Store) AggregateRequestEvents(ctx context.Context, from, to time.Time) ([]store.UsageRollup, error) {
	rs, err := list(ctx, s.d, s.pool, scanRollup, `SELECT `+s.d.HourBucket+` AS bucket, principal_id, upstream_id, model, `+eventSums+`
		FROM request_events WHERE at >= ? AND at < ?
		GROUP BY `+s.d.HourBucket+`, principal_id, upstream_id, model
		ORDER BY bucket, principal_id, upstream_id, model`, s.d.t(from), s.d.t(to))
	return rs, s.d.classify(err)
}

var usageColumn = map[string]string{"principal": "principal_id", "key": "key_id", "upstream": "upstream_id", "model": "model"}

// SumUsage implements store.UsageReader: whole rolled-up hours come from
// usage_key_rollups, the partial hours at the range's edges and the live
// hours from request_events, in one query.
func (s *Store) SumUsage(ctx context.Context, q store.UsageQuery) ([]store.UsageTotal, error) {
	grouped := map[string]bool{}
	for _, g := range q.GroupBy {
		if _, ok := usageColumn[g]; !ok {
			return nil, fmt.Errorf("usage: cannot group by %q", g)
		}
		grouped[g] = true
	}
	var sel, by []string
	for _, dim := range store.UsageDimensions {
		if grouped[dim] {
			sel = append(sel, usageColumn[dim])
			by = append(by, usageColumn[dim])
		} else {
			sel = append(sel, "''")
		}
	}
	// Rolled-up hours: [rs, re); events cover [From, rs) and [re, To).
	rs := q.From.UTC().Truncate(time.Hour)
	if rs.Before(q.From) {
		rs = rs.Add(time.Hour)
	}
	re := q.To.UTC().Truncate(time.Hour)
	if live := q.LiveFrom.UTC().Truncate(time.Hour); live.Before(re) {
		re = live
	}
	if !re.After(rs) {
		rs, re = q.To, q.To // no whole hour: everything from the events
	}
	var sums []string
	for _, c := range strings.Split(rollupCols, ",") {
		sums = append(sums, "COALESCE(SUM("+strings.TrimSpace(c)+"), 0)")
	}
	query := `SELECT ` + strings.Join(sel, ", ") + `, ` + strings.Join(sums, ", ") + ` FROM (
		SELECT principal_id, key_id, upstream_id, model, ` + rollupCols + ` FROM usage_key_rollups WHERE bucket_start >= ? AND bucket_start < ?
		UNION ALL
		SELECT principal_id, key_id, upstream_id, model, 1, CASE WHEN status >= 400 THEN 1 ELSE 0 END, input_tokens, output_tokens,
			cache_creation_input_tokens, cache_creation_1h_input_tokens, cache_read_input_tokens, COALESCE(cost_nanos, 0),
			CASE WHEN cost_nanos IS NULL THEN 1 ELSE 0 END
		FROM request_events WHERE (at >= ? AND at < ?) OR (at >= ? AND at < ?)) u`
	if len(by) > 0 {
		query += ` GROUP BY ` + strings.Join(by, ", ") + ` ORDER BY ` + strings.Join(by, ", ")
	}
	ts, err := list(ctx, s.d, s.pool, func(r scanner, u *store.UsageTotal) error {
		return r.Scan(append([]any{&u.PrincipalID, &u.KeyID, &u.UpstreamID, &u.Model}, countDests(&u.UsageCounts)...)...)
	}, query, s.d.t(rs), s.d.t(re), s.d.t(q.From), s.d.t(rs), s.d.t(re), s.d.t(q.To))
	if err != nil {
		return nil, s.d.classify(err)
	}
	// Without grouping the sums come back as one row even over no events.
	return slices.DeleteFunc(ts, func(u store.UsageTotal) bool { return u.Requests == 0 }), nil
}

// countDests are the scan destinations of rollupCols.
func countDests(c *store.UsageCounts) []any {
	return []any{&c.Requests, &c.Errors, &c.InputTokens, &c.OutputTokens, &c.CacheCreationInputTokens,
		&c.CacheCreation1hInputTokens, &c.CacheReadInputTokens, &c.CostNanos, &c.UnpricedRequests}
}

func (s *Store) InsertRequestEvents(ctx context.Context, events []store.RequestEvent) error {
	if len(events) == 0 {
		return nil
	}
	// Many rows per statement: the batch is written while requests are
	// served on the same cores, and one statement per row costs several
	// times the CPU of the rows themselves. The statements are prepared
	// once, for 2^k rows each (a batch of n takes one per bit of n):
	// parsing a fresh multi-row INSERT on every flush was a third of the
	// flush's CPU on SQLite. They are looked up before the transaction
	// starts, because preparing one may need a connection of its own (an
	// in-memory database has only one).
	type chunk struct {
		st *sql.Stmt
		n  int
	}
	var chunks []chunk
	for rest := len(events); rest > 0; {
		n := 1 << (bits.Len(uint(min(rest, eventsPerInsert))) - 1)
		st, err := s.prepared(ctx, insertEventsKeys[bits.Len(uint(n))-1], func() string { return insertEventsQuery(n) }, 0)
		if err != nil {
			return s.d.classify(err)
		}
		chunks = append(chunks, chunk{st, n})
		rest -= n
	}
	up, err := s.prepared(ctx, "upsert affinity", func() string { return upsertAffinity }, 0)
	if err != nil {
		return s.d.classify(err)
	}
	return s.tx(ctx, nil, func(tx *txn) error {
		// The newest use of each (principal, upstream) pair feeds
		// upstream_affinity, upserted in the same transaction.
		latest := map[[2]string]time.Time{}
		for _, e := range events {
			if e.UpstreamID != "" && e.PrincipalID != "" {
				k := [2]string{e.PrincipalID, e.UpstreamID}
				if e.At.After(latest[k]) {
					latest[k] = e.At
				}
			}
		}
		if len(latest) > 0 {
			up := tx.StmtContext(ctx, up)
			for k, at := range latest {
				if _, err := up.ExecContext(ctx, k[0], k[1], s.d.t(at)); err != nil {
					return err
				}
			}
		}
		for _, c := range chunks {
			if _, err := tx.StmtContext(ctx, c.st).ExecContext(ctx, insertEventsArgs(events[:c.n], s.d)...); err != nil {
				return err
			}
			events = events[c.n:]
		}
		return nil
	})
}

const upsertAffinity = `INSERT INTO upstream_affinity (principal_id, upstream_id, last_used_at) VALUES (?, ?, ?)
	ON CONFLICT (principal_id, upstream_id) DO UPDATE SET last_used_at = excluded.last_used_at
	WHERE upstream_affinity.last_used_at < excluded.last_used_at`

// eventsPerInsert bounds the rows of one INSERT: 19 parameters a row stay
// far below SQLite's and PostgreSQL's parameter limits. A power of two, so
// that a batch is written in INSERTs of 1, 2, 4, … rows
// (insertEventsShapes of them).
const (
	insertEventsShapes = 9
	eventsPerInsert    = 1 << (insertEventsShapes - 1)
)

const eventColumns = 20

// insertEventsKeys name the prepared INSERTs of 2^k rows.
var insertEventsKeys = func() (ks [insertEventsShapes]string) {
	for k := range ks {
		ks[k] = "insert events " + strconv.Itoa(1<<k)
	}
	return ks
}()

var insertEventsHead = `INSERT INTO request_events (id, at, principal_id, key_id, upstream_id, model, stream,
	status, error_type, input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens, duration_ms,
	cache_creation_1h_input_tokens, cost_nanos, price_version, ttfb_ms, dialect, upstream_model) VALUES `

// eventRow is one row's placeholders, one per column.
var eventRow = "(" + strings.Repeat("?, ", eventColumns-1) + "?)"

// insertEventsQuery is the INSERT of n rows, in '?' placeholders.
func insertEventsQuery(n int) string {
	row := eventRow
	var b strings.Builder
	b.Grow(len(insertEventsHead) + n*(len(row)+2))
	b.WriteString(insertEventsHead)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

// insertEventsArgs are the parameters of insertEventsQuery(len(events)).
func insertEventsArgs(events []store.RequestEvent, d *Dialect) []any {
	args := make([]any, 0, len(events)*eventColumns)
	for _, e := range events {
		id := e.ID
		if id == "" {
			id = store.NewID("ev")
		}
		args = append(args, id, d.t(e.At), e.PrincipalID, e.KeyID, e.UpstreamID, storableText(e.Model), e.Stream,
			e.Status, storableText(e.ErrorType), e.InputTokens, e.OutputTokens, e.CacheCreationInputTokens, e.CacheReadInputTokens,
			e.DurationMillis, e.CacheCreation1hInputTokens, e.CostNanos, nullString(e.PriceVersion), nullMillis(e.FirstByteMillis), nullString(e.Dialect),
			storableText(e.UpstreamModel))
	}
	return args
}

// storableText makes client- or upstream-chosen text storable on every
// driver: PostgreSQL refuses U+0000 and invalid UTF-8 in text, and one
// refused row fails its whole batch, which the recorder keeps retrying.
func storableText(v string) string {
	if utf8.ValidString(v) && strings.IndexByte(v, 0) < 0 {
		return v
	}
	return strings.ReplaceAll(strings.ToValidUTF8(v, "\uFFFD"), "\x00", "\uFFFD")
}

func (s *Store) ListRequestEvents(ctx context.Context, since time.Time, limit int) ([]store.RequestEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	return s.queryRequestEvents(ctx, `WHERE at >= ?`, s.d.t(since), limit)
}

func scanEvent(r scanner, e *store.RequestEvent) error {
	var ttfb sql.NullInt64
	err := r.Scan(&e.ID, reqTime{&e.At}, &e.PrincipalID, &e.KeyID, &e.UpstreamID, &e.Model, &e.Stream, &e.Status,
		&e.ErrorType, &e.InputTokens, &e.OutputTokens, &e.CacheCreationInputTokens, &e.CacheReadInputTokens,
		&e.DurationMillis, &e.CacheCreation1hInputTokens, &e.CostNanos, nullableString{&e.PriceVersion}, &ttfb, nullableString{&e.Dialect}, &e.UpstreamModel)
	e.FirstByteMillis = ttfb.Int64
	return err
}

// nullMillis stores 0 (not measured) as NULL.
func nullMillis(ms int64) sql.NullInt64 { return sql.NullInt64{Int64: ms, Valid: ms > 0} }

// queryRequestEvents reads request events matching cond (a WHERE clause
// with ? placeholders, or empty), newest first, at most the last argument.
func (s *Store) queryRequestEvents(ctx context.Context, cond string, args ...any) ([]store.RequestEvent, error) {
	es, err := list(ctx, s.d, s.pool, scanEvent, `SELECT id, at, principal_id, key_id, upstream_id, model, stream, status, error_type,
		input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens, duration_ms,
		cache_creation_1h_input_tokens, cost_nanos, price_version, ttfb_ms, dialect, upstream_model
		FROM request_events `+cond+` ORDER BY at DESC, id DESC LIMIT ?`, args...)
	return es, s.d.classify(err)
}

func (s *Store) RollupUsage(ctx context.Context, from, to time.Time) (int64, error) {
	from = from.UTC().Truncate(time.Hour)
	to = to.UTC().Truncate(time.Hour)
	if !to.After(from) {
		to = from.Add(time.Hour)
	}
	var n int64
	err := s.tx(ctx, nil, func(tx *txn) error {
		if _, err := s.exec(ctx, tx, "DELETE FROM usage_rollups WHERE bucket_start >= ? AND bucket_start < ?", s.d.t(from), s.d.t(to)); err != nil {
			return err
		}
		if _, err := s.exec(ctx, tx, "DELETE FROM usage_key_rollups WHERE bucket_start >= ? AND bucket_start < ?", s.d.t(from), s.d.t(to)); err != nil {
			return err
		}
		var err error
		n, err = s.exec(ctx, tx, `INSERT INTO usage_rollups (bucket_start, principal_id, upstream_id, model, `+rollupCols+`)
			SELECT `+s.d.HourBucket+`, principal_id, upstream_id, model, `+eventSums+`
			FROM request_events WHERE at >= ? AND at < ?
			GROUP BY `+s.d.HourBucket+`, principal_id, upstream_id, model`, s.d.t(from), s.d.t(to))
		if err != nil {
			return err
		}
		_, err = s.exec(ctx, tx, `INSERT INTO usage_key_rollups (bucket_start, principal_id, key_id, upstream_id, model, `+rollupCols+`)
			SELECT `+s.d.HourBucket+`, principal_id, key_id, upstream_id, model, `+eventSums+`
			FROM request_events WHERE at >= ? AND at < ?
			GROUP BY `+s.d.HourBucket+`, principal_id, key_id, upstream_id, model`, s.d.t(from), s.d.t(to))
		return err
	})
	return n, err
}

// scanRollup reads an hourly usage row, stored (usage_rollups) or computed
// (AggregateRequestEvents): both select the same columns in this order.
func scanRollup(r scanner, u *store.UsageRollup) error {
	return r.Scan(append([]any{reqTime{&u.BucketStart}, &u.PrincipalID, &u.UpstreamID, &u.Model}, countDests(&u.UsageCounts)...)...)
}

func (s *Store) ListUsageRollups(ctx context.Context, since time.Time) ([]store.UsageRollup, error) {
	rs, err := list(ctx, s.d, s.pool, scanRollup, `SELECT bucket_start, principal_id, upstream_id, model, `+rollupCols+`
		FROM usage_rollups WHERE bucket_start >= ?
		ORDER BY bucket_start, principal_id, upstream_id, model`, s.d.t(since.UTC().Truncate(time.Hour)))
	return rs, s.d.classify(err)
}

var pruneColumn = map[string]string{"request_events": "at", "audit_log": "at", "upstream_affinity": "last_used_at", "captured_exchanges": "at"}

func (s *Store) Prune(ctx context.Context, table string, before time.Time) (int64, error) {
	col, ok := pruneColumn[table]
	if !ok {
		return 0, fmt.Errorf("prune: %q is not prunable", table)
	}
	res, err := s.pool.ExecContext(ctx, s.d.rebind("DELETE FROM "+table+" WHERE "+col+" < ?"), s.d.t(before))
	if err != nil {
		return 0, s.d.classify(err)
	}
	n, err := res.RowsAffected()
	if err != nil || table != "upstream_affinity" {
		return n, err
	}
	// The router's session moves are affinity too, kept as long.
	res, err = s.pool.ExecContext(ctx, s.d.rebind("DELETE FROM upstream_affinity_sessions WHERE at_ms < ?"), before.UnixMilli())
	if err != nil {
		return n, s.d.classify(err)
	}
	m, err := res.RowsAffected()
	return n + m, err
}

// nullString stores "" as NULL.
func nullString(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// nullableString scans a nullable text column, NULL as "".
type nullableString struct{ dst *string }

func (n nullableString) Scan(src any) error {
	var ns sql.NullString
	if err := ns.Scan(src); err != nil {
		return err
	}
	*n.dst = ns.String
	return nil
}
