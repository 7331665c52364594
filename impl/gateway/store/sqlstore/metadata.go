package sqlstore

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Upstream metadata the gateway fetches on its own: model lists and the
// price catalog. Background state, so no audit row and no new generation.

func (s *Store) SetUpstreamModels(ctx context.Context, upstreamID string, models []store.UpstreamModel) error {
	// Upserts, not delete-then-insert: two refreshes running at once (a late
	// tick overlapping the next) must both succeed and converge.
	return s.tx(ctx, nil, func(tx *txn) error {
		keep := make([]any, 0, len(models)+1)
		keep = append(keep, upstreamID)
		marks := make([]string, 0, len(models))
		for _, m := range models {
			if _, err := s.exec(ctx, tx, `INSERT INTO upstream_models (upstream_id, model_id, display_name, refreshed_at) VALUES (?, ?, ?, ?)
				ON CONFLICT (upstream_id, model_id) DO UPDATE SET display_name = excluded.display_name, refreshed_at = excluded.refreshed_at`,
				upstreamID, m.ModelID, m.DisplayName, s.d.t(m.RefreshedAt)); err != nil {
				return err
			}
			keep = append(keep, m.ModelID)
			marks = append(marks, "?")
		}
		q := "DELETE FROM upstream_models WHERE upstream_id = ?"
		if len(marks) > 0 {
			q += " AND model_id NOT IN (" + strings.Join(marks, ", ") + ")"
		}
		_, err := s.exec(ctx, tx, q, keep...)
		return err
	})
}

func scanModel(r scanner, m *store.UpstreamModel) error {
	return r.Scan(&m.ModelID, &m.DisplayName, reqTime{&m.RefreshedAt})
}

func (s *Store) ListUpstreamModels(ctx context.Context, upstreamID string) ([]store.UpstreamModel, error) {
	ms, err := list(ctx, s.d, s.pool, scanModel, "SELECT model_id, display_name, refreshed_at FROM upstream_models WHERE upstream_id = ? ORDER BY model_id", upstreamID)
	return ms, s.d.classify(err)
}

func scanCatalog(r scanner, c *store.PriceCatalog) error {
	var body string
	if err := r.Scan(&c.Version, &c.ETag, &body, reqTime{&c.FetchedAt}); err != nil {
		return err
	}
	c.Body = json.RawMessage(body)
	return nil
}

func (s *Store) GetPriceCatalog(ctx context.Context) (*store.PriceCatalog, error) {
	c, err := one(ctx, s.d, s.pool, scanCatalog, "SELECT version, etag, body, fetched_at FROM price_catalog WHERE id = 1")
	return c, s.d.classify(err)
}

func (s *Store) PutPriceCatalog(ctx context.Context, c store.PriceCatalog) (bool, error) {
	// One atomic upsert that only writes a different version: of several
	// concurrent fetches of one version exactly one reports the change.
	res, err := s.pool.ExecContext(ctx, s.d.rebind(`INSERT INTO price_catalog (id, version, etag, body, fetched_at) VALUES (1, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET version = excluded.version, etag = excluded.etag, body = excluded.body, fetched_at = excluded.fetched_at
		WHERE price_catalog.version <> excluded.version`), c.Version, c.ETag, string(c.Body), s.d.t(c.FetchedAt))
	if err != nil {
		return false, s.d.classify(err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}
