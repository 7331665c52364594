package sqlstore

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// ----------------------------------------------------------------- audit

// insertAudit writes one audit row; auditArgs are its parameters.
const insertAudit = "INSERT INTO audit_log (id, at, actor, action, resource_kind, resource_id, revision, actor_kind, issuer, token_name, remote) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

// auditArgs are insertAudit's parameters for a change by ctx's actor; the
// row's id is reported to ctx's AuditNote.
func (s *Store) auditArgs(ctx context.Context, action, kind, id string, rev any) []any {
	a := store.ActorInfoFrom(ctx)
	rowID := store.NewID("au")
	store.NoteAudit(ctx, rowID)
	return []any{rowID, s.d.t(s.nowT()), a.Subject, action, kind, id, rev, a.Kind, a.Issuer, a.TokenName, a.Remote}
}

const auditCols = "id, at, actor, action, resource_kind, resource_id, revision, actor_kind, issuer, token_name, remote, before_doc, after_doc"

func scanAudit(r scanner, e *store.AuditEntry) error {
	var before, after *string
	if err := r.Scan(&e.ID, reqTime{&e.At}, &e.Actor, &e.Action, &e.ResourceKind, &e.ResourceID, &e.Revision,
		&e.ActorKind, &e.Issuer, &e.TokenName, &e.Remote, &before, &after); err != nil {
		return err
	}
	if before != nil {
		e.Before = json.RawMessage(*before)
	}
	if after != nil {
		e.After = json.RawMessage(*after)
	}
	return nil
}

func (s *Store) ListAudit(ctx context.Context, since time.Time, limit int) ([]store.AuditEntry, error) {
	return s.QueryAudit(ctx, store.AuditQuery{Since: since, Limit: limit})
}

func (s *Store) QueryAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditEntry, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	where := []string{"at >= ?"}
	args := []any{s.d.t(q.Since)}
	if !q.Until.IsZero() {
		where, args = append(where, "at < ?"), append(args, s.d.t(q.Until))
	}
	for col, v := range map[string]string{"actor": q.Actor, "actor_kind": q.ActorKind, "action": q.Action,
		"resource_kind": q.ResourceKind, "resource_id": q.ResourceID} {
		if v != "" {
			where, args = append(where, col+" = ?"), append(args, v)
		}
	}
	if q.After != nil {
		at := s.d.t(q.After.At)
		where, args = append(where, "(at < ? OR (at = ? AND id < ?))"), append(args, at, at, q.After.ID)
	}
	args = append(args, q.Limit)
	es, err := list(ctx, s.d, s.pool, scanAudit,
		"SELECT "+auditCols+" FROM audit_log WHERE "+strings.Join(where, " AND ")+" ORDER BY at DESC, id DESC LIMIT ?", args...)
	return es, s.d.classify(err)
}

func (s *Store) AnnotateAudit(ctx context.Context, ids []string, before, after json.RawMessage) error {
	if len(ids) == 0 {
		return nil
	}
	doc := func(v json.RawMessage) any {
		if v == nil {
			return nil
		}
		return string(v)
	}
	return s.tx(ctx, nil, func(tx *txn) error {
		for _, id := range ids {
			if _, err := s.exec(ctx, tx, "UPDATE audit_log SET before_doc = ?, after_doc = ? WHERE id = ?", doc(before), doc(after), id); err != nil {
				return err
			}
		}
		return nil
	})
}

// ---------------------------------------------------------- admin tokens

const adminTokenCols = "id, name, role, prefix, hash, created_at, expires_at, revoked_at, created_by"

func scanAdminToken(r scanner, t *store.AdminToken) error {
	return r.Scan(&t.ID, &t.Name, &t.Role, &t.Prefix, &t.Hash, reqTime{&t.CreatedAt}, reqTime{&t.ExpiresAt}, timeCol{&t.RevokedAt}, &t.CreatedBy)
}

// identityChange writes a token change's audit row in tx. It bumps no
// configuration generation: snapshots do not hold admin tokens.
func (s *Store) identityChange(ctx context.Context, tx *txn, action, id string) error {
	_, err := s.exec(ctx, tx, insertAudit, s.auditArgs(ctx, action, "admin_token", id, nil)...)
	return err
}

func (s *Store) CreateAdminToken(ctx context.Context, t store.AdminToken) (*store.AdminToken, error) {
	if t.ID == "" {
		t.ID = store.NewID("tok")
	}
	t.CreatedAt = s.nowT()
	t.RevokedAt = nil
	t.ExpiresAt = t.ExpiresAt.UTC().Truncate(time.Second)
	err := s.tx(ctx, nil, func(tx *txn) error {
		if _, err := s.exec(ctx, tx, "INSERT INTO admin_tokens ("+adminTokenCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			t.ID, t.Name, t.Role, t.Prefix, t.Hash, s.d.t(t.CreatedAt), s.d.t(t.ExpiresAt), nil, t.CreatedBy); err != nil {
			return err
		}
		return s.identityChange(ctx, tx, "create", t.ID)
	})
	if err != nil {
		return nil, err
	}
	return &t, nil
}

func (s *Store) ListAdminTokens(ctx context.Context) ([]store.AdminToken, error) {
	ts, err := list(ctx, s.d, s.pool, scanAdminToken, "SELECT "+adminTokenCols+" FROM admin_tokens ORDER BY created_at, id")
	return ts, s.d.classify(err)
}

func (s *Store) AdminTokenByHash(ctx context.Context, hash []byte) (*store.AdminToken, error) {
	t, err := one(ctx, s.d, s.pool, scanAdminToken, "SELECT "+adminTokenCols+" FROM admin_tokens WHERE hash = ?", hash)
	return t, s.d.classify(err)
}

func (s *Store) RevokeAdminToken(ctx context.Context, id string) (*store.AdminToken, error) {
	var out *store.AdminToken
	err := s.tx(ctx, nil, func(tx *txn) error {
		n, err := s.exec(ctx, tx, "UPDATE admin_tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", s.d.t(s.nowT()), id)
		if err != nil {
			return err
		}
		if out, err = one(ctx, s.d, tx, scanAdminToken, "SELECT "+adminTokenCols+" FROM admin_tokens WHERE id = ?", id); err != nil {
			return err
		}
		if n == 0 {
			return nil // already revoked: not a change
		}
		return s.identityChange(ctx, tx, "revoke", id)
	})
	return out, err
}
