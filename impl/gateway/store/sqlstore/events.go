package sqlstore

import (
	"context"
	"strings"
	"time"

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

// AggregateRequestEvents implements store.EventReader with the same grouping
// as RollupUsage, without writing anything.
func (s *Store) AggregateRequestEvents(ctx context.Context, from, to time.Time) ([]store.UsageRollup, error) {
	rows, err := s.db.QueryContext(ctx, s.d.rebind(`SELECT `+s.d.HourBucket+` AS bucket, principal_id, upstream_id, model, COUNT(*),
		SUM(CASE WHEN status >= 400 THEN 1 ELSE 0 END), SUM(input_tokens), SUM(output_tokens), SUM(cache_creation_input_tokens),
		SUM(cache_read_input_tokens)
		FROM request_events WHERE at >= ? AND at < ?
		GROUP BY `+s.d.HourBucket+`, principal_id, upstream_id, model
		ORDER BY bucket, principal_id, upstream_id, model`), s.d.t(from), s.d.t(to))
	if err != nil {
		return nil, s.d.classify(err)
	}
	defer rows.Close()
	out := []store.UsageRollup{}
	for rows.Next() {
		var r store.UsageRollup
		if err := rows.Scan(reqTime{&r.BucketStart}, &r.PrincipalID, &r.UpstreamID, &r.Model, &r.Requests, &r.Errors,
			&r.InputTokens, &r.OutputTokens, &r.CacheCreationInputTokens, &r.CacheReadInputTokens); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, s.d.classify(rows.Err())
}
