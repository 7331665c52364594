package sqlstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// --------------------------------------------------------------- webhooks

const webhookCols = "id, name, url, secret, conditions, enabled, revision, created_at, updated_at"

func scanWebhook(r scanner, w *store.Webhook) error {
	var conds string
	if err := r.Scan(&w.ID, &w.Name, &w.URL, &w.Secret, &conds, &w.Enabled, &w.Revision, reqTime{&w.CreatedAt}, reqTime{&w.UpdatedAt}); err != nil {
		return err
	}
	w.Conditions = []string{}
	return json.Unmarshal([]byte(conds), &w.Conditions)
}

var webhookTable = &table[store.Webhook]{
	sel: "SELECT " + webhookCols + " FROM webhooks ", byID: "WHERE id = ?", order: " ORDER BY created_at, id",
	scan: scanWebhook, revision: func(w *store.Webhook) int64 { return w.Revision },
}

func jsonConditions(cs []string) string {
	if cs == nil {
		cs = []string{}
	}
	b, _ := json.Marshal(cs)
	return string(b)
}

// webhookChange audits a webhook change in tx; webhooks are not part of
// the configuration the replicas load, so the generation stays.
func (s *Store) webhookChange(ctx context.Context, tx *txn, action, id string, rev int64) error {
	var r any
	if rev != 0 {
		r = rev
	}
	_, err := s.exec(ctx, tx, insertAudit, s.auditArgs(ctx, action, "webhook", id, r)...)
	return err
}

func (s *Store) CreateWebhook(ctx context.Context, w store.Webhook) (*store.Webhook, error) {
	if w.ID == "" {
		w.ID = store.NewID("wh")
	}
	var out *store.Webhook
	err := s.tx(ctx, nil, func(tx *txn) error {
		now := s.d.t(s.nowT())
		if _, err := s.exec(ctx, tx, "INSERT INTO webhooks ("+webhookCols+") VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?)",
			w.ID, w.Name, w.URL, w.Secret, jsonConditions(w.Conditions), w.Enabled, now, now); err != nil {
			return err
		}
		var err error
		if out, err = webhookTable.get(ctx, s.d, tx, w.ID); err != nil {
			return err
		}
		return s.webhookChange(ctx, tx, "create", w.ID, out.Revision)
	})
	return out, err
}

func (s *Store) GetWebhook(ctx context.Context, id string) (*store.Webhook, error) {
	w, err := webhookTable.get(ctx, s.d, s.pool, id)
	return w, s.d.classify(err)
}

func (s *Store) ListWebhooks(ctx context.Context) ([]store.Webhook, error) {
	ws, err := webhookTable.list(ctx, s.d, s.pool, "")
	return ws, s.d.classify(err)
}

func (s *Store) UpdateWebhook(ctx context.Context, id string, expect int64, w store.Webhook) (*store.Webhook, error) {
	var out *store.Webhook
	err := s.tx(ctx, nil, func(tx *txn) error {
		cur, err := webhookTable.get(ctx, s.d, tx, id)
		if err != nil {
			return err
		}
		if w.Secret == nil {
			w.Secret = cur.Secret
		}
		n, err := s.exec(ctx, tx, `UPDATE webhooks SET name = ?, url = ?, secret = ?, conditions = ?, enabled = ?, revision = revision + 1, updated_at = ?
			WHERE id = ? AND (? = 0 OR revision = ?)`,
			w.Name, w.URL, w.Secret, jsonConditions(w.Conditions), w.Enabled, s.d.t(s.nowT()), id, expect, expect)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrStaleRevision
		}
		if out, err = webhookTable.get(ctx, s.d, tx, id); err != nil {
			return err
		}
		return s.webhookChange(ctx, tx, "update", id, out.Revision)
	})
	return out, err
}

func (s *Store) DeleteWebhook(ctx context.Context, id string, expect int64) error {
	return s.tx(ctx, nil, func(tx *txn) error {
		cur, err := webhookTable.get(ctx, s.d, tx, id)
		if err != nil {
			return err
		}
		n, err := s.exec(ctx, tx, "DELETE FROM webhooks WHERE id = ? AND (? = 0 OR revision = ?)", id, expect, expect)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrStaleRevision
		}
		return s.webhookChange(ctx, tx, "delete", id, cur.Revision)
	})
}

// ----------------------------------------------------------- alert states

const alertStateCols = "alert_key, firing, episode, since"

func scanAlertState(r scanner, a *store.AlertState) error {
	return r.Scan(&a.Key, &a.Firing, &a.Episode, reqTime{&a.Since})
}

func (s *Store) SetAlertState(ctx context.Context, key string, firing bool, at time.Time) (store.AlertState, bool, error) {
	var out store.AlertState
	changed := false
	err := s.tx(ctx, nil, func(tx *txn) error {
		// Each statement moves the row only from the other state, so of
		// replicas racing on one key exactly one sees a row written.
		var n int64
		var err error
		if firing {
			n, err = s.exec(ctx, tx, "INSERT INTO alert_states ("+alertStateCols+") VALUES (?, ?, 1, ?) ON CONFLICT (alert_key) DO NOTHING",
				key, true, s.d.t(at))
			if err == nil && n == 0 {
				n, err = s.exec(ctx, tx, "UPDATE alert_states SET firing = ?, episode = episode + 1, since = ? WHERE alert_key = ? AND firing = ?",
					true, s.d.t(at), key, false)
			}
		} else {
			n, err = s.exec(ctx, tx, "UPDATE alert_states SET firing = ?, since = ? WHERE alert_key = ? AND firing = ?",
				false, s.d.t(at), key, true)
		}
		if err != nil {
			return err
		}
		changed = n > 0
		cur, err := one(ctx, s.d, tx, scanAlertState, "SELECT "+alertStateCols+" FROM alert_states WHERE alert_key = ?", key)
		if err == store.ErrNotFound {
			out = store.AlertState{Key: key}
			return nil
		}
		if err != nil {
			return err
		}
		out = *cur
		return nil
	})
	return out, changed, err
}

func (s *Store) ListAlertStates(ctx context.Context) ([]store.AlertState, error) {
	as, err := list(ctx, s.d, s.pool, scanAlertState, "SELECT "+alertStateCols+" FROM alert_states WHERE firing = ? ORDER BY alert_key", true)
	return as, s.d.classify(err)
}
