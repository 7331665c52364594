package sqlstore

import (
	"context"
	"slices"
	"time"
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
