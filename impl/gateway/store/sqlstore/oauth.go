package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Background state of OAuth upstreams. Nothing here is configuration, so
// these transactions pass no change: no audit row, no new generation.

func (s *Store) CreateOAuthFlow(ctx context.Context, f store.OAuthFlow) error {
	return s.tx(ctx, nil, func(tx *txn) error {
		_, err := s.exec(ctx, tx, `INSERT INTO oauth_flows (state, upstream_id, verifier, redirect_uri, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?)`, f.State, f.UpstreamID, f.Verifier, f.RedirectURI, s.d.t(f.CreatedAt), s.d.t(f.ExpiresAt))
		return err
	})
}

func scanFlow(r scanner, f *store.OAuthFlow) error {
	return r.Scan(&f.State, &f.UpstreamID, &f.Verifier, &f.RedirectURI, reqTime{&f.CreatedAt}, reqTime{&f.ExpiresAt})
}

func (s *Store) TakeOAuthFlow(ctx context.Context, state string, now time.Time) (*store.OAuthFlow, error) {
	var f *store.OAuthFlow
	err := s.tx(ctx, nil, func(tx *txn) error {
		// DELETE … RETURNING: of two concurrent completions only one gets the row.
		var err error
		f, err = one(ctx, s.d, tx, scanFlow, `DELETE FROM oauth_flows WHERE state = ?
			RETURNING state, upstream_id, verifier, redirect_uri, created_at, expires_at`, state)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !now.Before(f.ExpiresAt) {
		return nil, store.ErrNotFound
	}
	return f, nil
}

const quotaCols = `upstream_id, credential_version, polled_at, observed_at, five_hour_utilization, five_hour_resets_at,
	seven_day_utilization, seven_day_resets_at, extra_usage, coupon_reported, coupon_available, coupon_id, coupon_expires_at,
	account_uuid, identity_version, fence_id, fence_state, fence_at, fence_resolved_at`

func scanQuota(r scanner, o *store.QuotaObservation) error {
	var extra, couponID, account, fenceID, fenceState sql.NullString
	var identity sql.NullInt64
	var fenceAt, fenceResolved *time.Time
	if err := r.Scan(&o.UpstreamID, &o.CredentialVersion, reqTime{&o.PolledAt}, reqTime{&o.ObservedAt},
		&o.FiveHour.Utilization, timeCol{&o.FiveHour.ResetsAt}, &o.SevenDay.Utilization, timeCol{&o.SevenDay.ResetsAt},
		&extra, &o.CouponReported, &o.CouponAvailable, &couponID, timeCol{&o.CouponExpiresAt},
		&account, &identity, &fenceID, &fenceState, timeCol{&fenceAt}, timeCol{&fenceResolved}); err != nil {
		return err
	}
	if extra.Valid {
		o.ExtraUsage = []byte(extra.String)
	}
	o.CouponID, o.AccountUUID, o.IdentityVersion = couponID.String, account.String, identity.Int64
	if fenceState.Valid && fenceAt != nil {
		o.Fence = &store.CouponFence{ID: fenceID.String, State: fenceState.String, AcquiredAt: *fenceAt, ResolvedAt: fenceResolved}
	}
	return nil
}

func (s *Store) getQuota(ctx context.Context, q querier, id string, lock bool) (*store.QuotaObservation, error) {
	query := "SELECT " + quotaCols + " FROM upstream_quota WHERE upstream_id = ?"
	if lock && s.d.Name == "postgres" {
		query += " FOR UPDATE"
	}
	return one(ctx, s.d, q, scanQuota, query, id)
}

func (s *Store) GetQuota(ctx context.Context, upstreamID string) (*store.QuotaObservation, error) {
	o, err := s.getQuota(ctx, s.pool, upstreamID, false)
	return o, s.d.classify(err)
}

func nullStr(v string) any {
	if v == "" {
		return nil
	}
	return v
}

func (s *Store) PutQuota(ctx context.Context, obs store.QuotaObservation, recoverAfter time.Duration) (bool, error) {
	applied := false
	err := s.tx(ctx, nil, func(tx *txn) error {
		cur, err := s.getQuota(ctx, tx, obs.UpstreamID, true)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		next := obs
		next.Fence = nil
		if cur != nil {
			if f := cur.Fence; f != nil {
				switch f.State {
				case store.FenceClaiming:
					if obs.PolledAt.Before(f.AcquiredAt.Add(recoverAfter)) {
						// The claim is unresolved: keep the coupon as the fence
						// left it; only a poll after the recovery delay may
						// replace it.
						next.Fence = f
						next.CouponReported, next.CouponAvailable, next.CouponID, next.CouponExpiresAt =
							cur.CouponReported, cur.CouponAvailable, cur.CouponID, cur.CouponExpiresAt
					}
				default: // consumed or rejected
					if f.ResolvedAt == nil || !obs.PolledAt.After(*f.ResolvedAt) {
						// Sent before the claim was resolved: everything in it
						// predates the reset.
						return nil
					}
				}
			}
			if next.AccountUUID == "" && cur.IdentityVersion == obs.CredentialVersion {
				next.AccountUUID, next.IdentityVersion = cur.AccountUUID, cur.IdentityVersion
			}
		}
		var extra any
		if len(next.ExtraUsage) > 0 {
			extra = string(next.ExtraUsage)
		}
		var identity any
		if next.AccountUUID != "" {
			identity = next.IdentityVersion
		}
		var fenceID, fenceState, fenceAt, fenceResolved any
		if f := next.Fence; f != nil {
			fenceID, fenceState, fenceAt, fenceResolved = f.ID, f.State, s.d.t(f.AcquiredAt), s.d.tp(f.ResolvedAt)
		}
		args := []any{next.CredentialVersion, s.d.t(next.PolledAt), s.d.t(next.ObservedAt),
			next.FiveHour.Utilization, s.d.tp(next.FiveHour.ResetsAt), next.SevenDay.Utilization, s.d.tp(next.SevenDay.ResetsAt),
			extra, next.CouponReported, next.CouponAvailable, nullStr(next.CouponID), s.d.tp(next.CouponExpiresAt),
			nullStr(next.AccountUUID), identity, fenceID, fenceState, fenceAt, fenceResolved}
		if cur == nil {
			_, err = s.exec(ctx, tx, "INSERT INTO upstream_quota ("+quotaCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
				append([]any{next.UpstreamID}, args...)...)
		} else {
			_, err = s.exec(ctx, tx, `UPDATE upstream_quota SET credential_version = ?, polled_at = ?, observed_at = ?,
				five_hour_utilization = ?, five_hour_resets_at = ?, seven_day_utilization = ?, seven_day_resets_at = ?,
				extra_usage = ?, coupon_reported = ?, coupon_available = ?, coupon_id = ?, coupon_expires_at = ?,
				account_uuid = ?, identity_version = ?, fence_id = ?, fence_state = ?, fence_at = ?, fence_resolved_at = ?
				WHERE upstream_id = ?`, append(args, next.UpstreamID)...)
		}
		applied = err == nil
		return err
	})
	return applied, err
}

func (s *Store) AcquireCouponFence(ctx context.Context, upstreamID, couponID string, credentialVersion int64, now time.Time) (string, error) {
	id := store.NewID("fence")
	err := s.tx(ctx, nil, func(tx *txn) error {
		// One conditional UPDATE is the atomic test-and-set on both drivers.
		n, err := s.exec(ctx, tx, `UPDATE upstream_quota SET fence_id = ?, fence_state = ?, fence_at = ?, fence_resolved_at = NULL
			WHERE upstream_id = ? AND fence_state IS NULL AND coupon_available = ? AND coupon_id = ? AND credential_version = ?`,
			id, store.FenceClaiming, s.d.t(now), upstreamID, true, couponID, credentialVersion)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrConflict
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return id, nil
}

func (s *Store) ResolveCouponFence(ctx context.Context, upstreamID, fenceID, outcome string, now time.Time) error {
	return s.tx(ctx, nil, func(tx *txn) error {
		var n int64
		var err error
		switch outcome {
		case store.FenceReleased:
			n, err = s.exec(ctx, tx, `UPDATE upstream_quota SET fence_id = NULL, fence_state = NULL, fence_at = NULL, fence_resolved_at = NULL
				WHERE upstream_id = ? AND fence_id = ? AND fence_state = ?`, upstreamID, fenceID, store.FenceClaiming)
		case store.FenceConsumed, store.FenceRejected:
			n, err = s.exec(ctx, tx, `UPDATE upstream_quota SET fence_state = ?, fence_resolved_at = ?, coupon_available = ?, coupon_id = NULL
				WHERE upstream_id = ? AND fence_id = ? AND fence_state = ?`, outcome, s.d.t(now), false, upstreamID, fenceID, store.FenceClaiming)
		default:
			return errors.New("unknown fence outcome " + outcome)
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrNotFound // recovered by a poll meanwhile, or never held
		}
		return nil
	})
}

func (s *Store) GetWarmupState(ctx context.Context, upstreamID string) (*store.WarmupState, error) {
	w, err := one(ctx, s.d, s.pool, func(r scanner, w *store.WarmupState) error {
		var cycle, reset, owner sql.NullString
		if err := r.Scan(&cycle, timeCol{&w.CycleWrittenAt}, &reset, timeCol{&w.ResetRecordedAt}, &owner, timeCol{&w.LeaseUntil}); err != nil {
			return err
		}
		w.CycleKey, w.ResetCycleKey, w.LeaseOwner = cycle.String, reset.String, owner.String
		return nil
	}, `SELECT cycle_key, cycle_written_at, reset_cycle_key, reset_recorded_at, lease_owner, lease_until
		FROM upstream_warmup WHERE upstream_id = ?`, upstreamID)
	if errors.Is(err, store.ErrNotFound) {
		return &store.WarmupState{UpstreamID: upstreamID}, nil // never warmed: the empty state
	}
	if err != nil {
		return nil, s.d.classify(err)
	}
	w.UpstreamID = upstreamID
	return w, nil
}

// ensureWarmupRow creates the upstream's warm-up record if missing.
func (s *Store) ensureWarmupRow(ctx context.Context, tx *txn, upstreamID string) error {
	_, err := s.exec(ctx, tx, "INSERT INTO upstream_warmup (upstream_id) VALUES (?) ON CONFLICT (upstream_id) DO NOTHING", upstreamID)
	return err
}

func (s *Store) AcquireWarmupLease(ctx context.Context, upstreamID, owner string, until, now time.Time) (bool, error) {
	got := false
	err := s.tx(ctx, nil, func(tx *txn) error {
		if err := s.ensureWarmupRow(ctx, tx, upstreamID); err != nil {
			return err
		}
		n, err := s.exec(ctx, tx, `UPDATE upstream_warmup SET lease_owner = ?, lease_until = ?
			WHERE upstream_id = ? AND (lease_until IS NULL OR lease_until <= ? OR lease_owner = ?)`,
			owner, s.d.t(until), upstreamID, s.d.t(now), owner)
		got = n == 1
		return err
	})
	return got, err
}

func (s *Store) ReleaseWarmupLease(ctx context.Context, upstreamID, owner string) error {
	return s.tx(ctx, nil, func(tx *txn) error {
		_, err := s.exec(ctx, tx, "UPDATE upstream_warmup SET lease_owner = NULL, lease_until = NULL WHERE upstream_id = ? AND lease_owner = ?",
			upstreamID, owner)
		return err
	})
}

func (s *Store) WriteCycleKey(ctx context.Context, upstreamID, cycleKey string, now time.Time) (bool, error) {
	written := false
	err := s.tx(ctx, nil, func(tx *txn) error {
		if err := s.ensureWarmupRow(ctx, tx, upstreamID); err != nil {
			return err
		}
		n, err := s.exec(ctx, tx, `UPDATE upstream_warmup SET cycle_key = ?, cycle_written_at = ?
			WHERE upstream_id = ? AND (cycle_key IS NULL OR cycle_key <> ?)`, cycleKey, s.d.t(now), upstreamID, cycleKey)
		if err != nil || n == 0 {
			return err
		}
		written = true
		// A status write: never bumps spec_revision.
		_, err = s.exec(ctx, tx, "UPDATE upstreams SET last_warmup_at = ? WHERE id = ?", s.d.t(now), upstreamID)
		return err
	})
	return written, err
}

func (s *Store) RecordResetCycleKey(ctx context.Context, upstreamID, cycleKey string, now time.Time) error {
	return s.tx(ctx, nil, func(tx *txn) error {
		if err := s.ensureWarmupRow(ctx, tx, upstreamID); err != nil {
			return err
		}
		_, err := s.exec(ctx, tx, "UPDATE upstream_warmup SET reset_cycle_key = ?, reset_recorded_at = ? WHERE upstream_id = ?",
			cycleKey, s.d.t(now), upstreamID)
		return err
	})
}

func (s *Store) CollectQuotaGarbage(ctx context.Context, now time.Time) (store.QuotaGC, error) {
	var gc store.QuotaGC
	err := s.tx(ctx, nil, func(tx *txn) error {
		// Rows whose upstream is gone or holds no OAuth credential any more:
		// a new credential starts from a fresh observation anyway.
		orphan := `upstream_id NOT IN (SELECT id FROM upstreams WHERE deleted_at IS NULL AND credential_kind = 'oauth')`
		var err error
		if gc.Observations, err = s.exec(ctx, tx, "DELETE FROM upstream_quota WHERE "+orphan); err != nil {
			return err
		}
		if gc.WarmupStates, err = s.exec(ctx, tx, "DELETE FROM upstream_warmup WHERE "+orphan); err != nil {
			return err
		}
		gc.Flows, err = s.exec(ctx, tx, "DELETE FROM oauth_flows WHERE expires_at <= ?", s.d.t(now))
		return err
	})
	return gc, err
}
