package sqlstore

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func (s *Store) SyncLimitWindows(ctx context.Context, deltas []store.LimitWindow, now time.Time) ([]store.LimitWindow, error) {
	var out []store.LimitWindow
	err := s.tx(ctx, nil, func(tx *txn) error {
		// Upserts in key order: two replicas syncing the same windows
		// lock their rows in the same order and cannot deadlock.
		sortWindows(deltas)
		for _, d := range deltas {
			if _, err := s.exec(ctx, tx, `INSERT INTO limit_windows (principal_id, kind, window_secs, window_start, count, expires_at)
				VALUES (?, ?, ?, ?, ?, ?)
				ON CONFLICT (principal_id, kind, window_secs, window_start) DO UPDATE SET count = limit_windows.count + excluded.count`,
				d.PrincipalID, d.Kind, d.WindowSecs, d.Start, d.Count, d.Start+2*d.WindowSecs); err != nil {
				return err
			}
		}
		if _, err := s.exec(ctx, tx, "DELETE FROM limit_windows WHERE expires_at <= ?", now.Unix()); err != nil {
			return err
		}
		var err error
		out, err = list(ctx, s.d, tx, func(r scanner, w *store.LimitWindow) error {
			return r.Scan(&w.PrincipalID, &w.Kind, &w.WindowSecs, &w.Start, &w.Count)
		}, `SELECT principal_id, kind, window_secs, window_start, count FROM limit_windows
			WHERE expires_at > ? ORDER BY principal_id, kind, window_secs, window_start`, now.Unix())
		return err
	})
	return out, err
}

func sortWindows(ws []store.LimitWindow) {
	slices.SortFunc(ws, func(a, b store.LimitWindow) int {
		return cmp.Or(strings.Compare(a.PrincipalID, b.PrincipalID), strings.Compare(a.Kind, b.Kind),
			cmp.Compare(a.WindowSecs, b.WindowSecs), cmp.Compare(a.Start, b.Start))
	})
}
