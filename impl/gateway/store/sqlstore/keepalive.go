package sqlstore

import (
	"context"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

const keepaliveCols = `id, principal_id, session_hash, upstream_id, model, generation, ttl_secs, turn_started_at, anchor_at,
	expires_at, refreshes, refresh_budget, snapshot, state, stop_reason, updated_at`

func scanKeepAlive(r scanner, k *store.KeepAliveSession) error {
	var ttl int64
	if err := r.Scan(&k.ID, &k.PrincipalID, &k.SessionHash, &k.UpstreamID, &k.Model, &k.Generation, &ttl,
		reqTime{&k.TurnStartedAt}, reqTime{&k.AnchorAt}, reqTime{&k.ExpiresAt}, &k.Refreshes, &k.RefreshBudget,
		&k.Snapshot, &k.State, &k.StopReason, reqTime{&k.UpdatedAt}); err != nil {
		return err
	}
	k.TTL = time.Duration(ttl) * time.Second
	return nil
}

func (s *Store) getKeepAlive(ctx context.Context, q querier, where string, args ...any) (*store.KeepAliveSession, error) {
	return one(ctx, s.d, q, scanKeepAlive, "SELECT "+keepaliveCols+" FROM keepalive_sessions "+where, args...)
}

func (s *Store) UpsertKeepAliveSession(ctx context.Context, in store.KeepAliveSession) (*store.KeepAliveSession, error) {
	var out *store.KeepAliveSession
	err := s.tx(ctx, nil, func(tx *txn) error {
		now := s.d.t(s.nowT())
		ttl := int64(in.TTL / time.Second)
		// One statement: concurrent turns of one conversation on several
		// replicas each get their own generation.
		_, err := s.exec(ctx, tx, `INSERT INTO keepalive_sessions (`+keepaliveCols+`)
			VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, 0, ?, ?, 'active', '', ?)
			ON CONFLICT (principal_id, session_hash) DO UPDATE SET
			  upstream_id = excluded.upstream_id, model = excluded.model, generation = keepalive_sessions.generation + 1,
			  ttl_secs = excluded.ttl_secs, turn_started_at = excluded.turn_started_at, anchor_at = excluded.anchor_at,
			  expires_at = excluded.expires_at, refreshes = 0, refresh_budget = excluded.refresh_budget,
			  snapshot = excluded.snapshot, state = excluded.state, stop_reason = excluded.stop_reason, updated_at = excluded.updated_at`,
			store.NewID("ka"), in.PrincipalID, in.SessionHash, in.UpstreamID, in.Model, ttl, s.d.t(in.TurnStartedAt), s.d.t(in.AnchorAt),
			s.d.t(in.ExpiresAt), in.RefreshBudget, in.Snapshot, now)
		if err != nil {
			return err
		}
		out, err = s.getKeepAlive(ctx, tx, "WHERE principal_id = ? AND session_hash = ?", in.PrincipalID, in.SessionHash)
		return err
	})
	return out, err
}

func (s *Store) GetKeepAliveSession(ctx context.Context, id string) (*store.KeepAliveSession, error) {
	k, err := s.getKeepAlive(ctx, s.pool, "WHERE id = ?", id)
	return k, s.d.classify(err)
}

func (s *Store) RecordKeepAliveRefresh(ctx context.Context, id string, generation int64, anchor, expiresAt time.Time) (bool, error) {
	ok := false
	err := s.tx(ctx, nil, func(tx *txn) error {
		n, err := s.exec(ctx, tx, `UPDATE keepalive_sessions SET refreshes = refreshes + 1, anchor_at = ?, expires_at = ?, updated_at = ?
			WHERE id = ? AND generation = ? AND state = 'active'`, s.d.t(anchor), s.d.t(expiresAt), s.d.t(s.nowT()), id, generation)
		ok = n == 1
		return err
	})
	return ok, err
}

func (s *Store) StopKeepAliveSession(ctx context.Context, id string, generation int64, reason string, now time.Time) (bool, error) {
	ok := false
	err := s.tx(ctx, nil, func(tx *txn) error {
		n, err := s.exec(ctx, tx, `UPDATE keepalive_sessions SET state = 'stopped', stop_reason = ?, updated_at = ?
			WHERE id = ? AND generation = ?`, reason, s.d.t(now), id, generation)
		ok = n == 1
		return err
	})
	return ok, err
}

func (s *Store) DeleteExpiredKeepAliveSessions(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.tx(ctx, nil, func(tx *txn) error {
		var err error
		n, err = s.exec(ctx, tx, "DELETE FROM keepalive_sessions WHERE expires_at < ?", s.d.t(before))
		return err
	})
	return n, err
}

func (s *Store) SetKeepAliveSnapshot(ctx context.Context, id string, generation int64, sealed []byte) error {
	return s.tx(ctx, nil, func(tx *txn) error {
		n, err := s.exec(ctx, tx, "UPDATE keepalive_sessions SET snapshot = ? WHERE id = ? AND generation = ?", sealed, id, generation)
		if err == nil && n == 0 {
			return store.ErrStaleRevision
		}
		return err
	})
}
