package sqlstore

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func (s *Store) SyncCooldowns(ctx context.Context, learnt map[string]time.Time, now time.Time) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := s.tx(ctx, nil, func(tx *txn) error {
		// In id order: two replicas storing the same upstreams lock their
		// rows in the same order and cannot deadlock.
		ids := make([]string, 0, len(learnt))
		for id := range learnt {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			// A cooldown only extends: a shorter one stored later keeps the longer.
			if _, err := s.exec(ctx, tx, `INSERT INTO upstream_cooldowns (upstream_id, until_ms) VALUES (?, ?)
				ON CONFLICT (upstream_id) DO UPDATE SET until_ms = excluded.until_ms WHERE upstream_cooldowns.until_ms < excluded.until_ms`,
				id, learnt[id].UnixMilli()); err != nil {
				return err
			}
		}
		if _, err := s.exec(ctx, tx, "DELETE FROM upstream_cooldowns WHERE until_ms <= ?", now.UnixMilli()); err != nil {
			return err
		}
		type row struct {
			id    string
			until int64
		}
		rows, err := list(ctx, s.d, tx, func(r scanner, w *row) error { return r.Scan(&w.id, &w.until) },
			"SELECT upstream_id, until_ms FROM upstream_cooldowns WHERE until_ms > ? ORDER BY upstream_id", now.UnixMilli())
		for _, r := range rows {
			out[r.id] = time.UnixMilli(r.until)
		}
		return err
	})
	return out, err
}

func (s *Store) SyncAffinity(ctx context.Context, moves []store.SessionMove, since time.Time) ([]store.SessionMove, error) {
	var out []store.SessionMove
	err := s.tx(ctx, nil, func(tx *txn) error {
		// In key order, so two replicas cannot deadlock on their rows.
		moves = slices.Clone(moves)
		slices.SortFunc(moves, func(a, b store.SessionMove) int { return strings.Compare(a.SessionKey, b.SessionKey) })
		for _, m := range moves {
			// The newer record of a session wins.
			if _, err := s.exec(ctx, tx, `INSERT INTO upstream_affinity_sessions (session_key, upstream_id, at_ms) VALUES (?, ?, ?)
				ON CONFLICT (session_key) DO UPDATE SET upstream_id = excluded.upstream_id, at_ms = excluded.at_ms
				WHERE upstream_affinity_sessions.at_ms <= excluded.at_ms`,
				m.SessionKey, m.UpstreamID, m.At.UnixMilli()); err != nil {
				return err
			}
		}
		var err error
		out, err = list(ctx, s.d, tx, func(r scanner, m *store.SessionMove) error {
			var ms int64
			if err := r.Scan(&m.SessionKey, &m.UpstreamID, &ms); err != nil {
				return err
			}
			m.At = time.UnixMilli(ms)
			return nil
		}, "SELECT session_key, upstream_id, at_ms FROM upstream_affinity_sessions WHERE at_ms >= ? ORDER BY session_key", since.UnixMilli())
		return err
	})
	return out, s.d.classify(err)
}

func (s *Store) ListQuotaWindows(ctx context.Context) (map[string]store.QuotaWindows, error) {
	type row struct {
		id string
		w  store.QuotaWindows
	}
	rows, err := list(ctx, s.d, s.pool, func(r scanner, w *row) error {
		return r.Scan(&w.id, &w.w.FiveHour.Utilization, timeCol{&w.w.FiveHour.ResetsAt}, &w.w.SevenDay.Utilization, timeCol{&w.w.SevenDay.ResetsAt})
	}, "SELECT upstream_id, five_hour_utilization, five_hour_resets_at, seven_day_utilization, seven_day_resets_at FROM upstream_quota")
	if err != nil {
		return nil, s.d.classify(err)
	}
	out := make(map[string]store.QuotaWindows, len(rows))
	for _, r := range rows {
		out[r.id] = r.w
	}
	return out, nil
}
