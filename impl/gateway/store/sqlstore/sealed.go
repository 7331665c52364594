package sqlstore

import (
	"context"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// sealedColumn is one sealed column: how to read its rows (key columns
// first, the ciphertext last) and how to write one back.
type sealedColumn struct {
	kind   string
	query  string
	update string
	scan   func(r scanner, v *store.Sealed) (key []any, err error)
}

var sealedColumns = []sealedColumn{
	{
		kind:   store.SealedUpstreamCredential,
		query:  upstreamCredentials,
		update: "UPDATE upstreams SET credential = ? WHERE id = ?",
		scan:   scanUpstreamCredential,
	},
	{
		kind:   store.SealedOAuthVerifier,
		query:  "SELECT state, upstream_id, verifier FROM oauth_flows ORDER BY state",
		update: "UPDATE oauth_flows SET verifier = ? WHERE state = ?",
		scan: func(rows scanner, v *store.Sealed) ([]any, error) {
			err := rows.Scan(&v.State, &v.UpstreamID, &v.Ciphertext)
			return []any{v.State}, err
		},
	},
	{
		kind: store.SealedKeepAliveSnapshot,
		// A session whose snapshot is not sealed yet holds one
		// placeholder byte (see keepalive.Service): nothing to re-seal.
		query:  "SELECT id, principal_id, session_hash, upstream_id, generation, snapshot FROM keepalive_sessions ORDER BY id",
		update: "UPDATE keepalive_sessions SET snapshot = ? WHERE id = ?",
		scan: func(rows scanner, v *store.Sealed) ([]any, error) {
			var id string
			err := rows.Scan(&id, &v.PrincipalID, &v.SessionHash, &v.UpstreamID, &v.Generation, &v.Ciphertext)
			return []any{id}, err
		},
	},
	{
		kind:   store.SealedWebhookSecret,
		query:  "SELECT id, url, secret FROM webhooks ORDER BY id",
		update: "UPDATE webhooks SET secret = ? WHERE id = ?",
		scan: func(rows scanner, v *store.Sealed) ([]any, error) {
			err := rows.Scan(&v.WebhookID, &v.BaseURL, &v.Ciphertext)
			return []any{v.WebhookID}, err
		},
	},
	{
		kind:   store.SealedCapturedExchange,
		query:  "SELECT event_id, principal_id, sealed FROM captured_exchanges ORDER BY event_id",
		update: "UPDATE captured_exchanges SET sealed = ? WHERE event_id = ?",
		scan: func(rows scanner, v *store.Sealed) ([]any, error) {
			err := rows.Scan(&v.ExchangeID, &v.PrincipalID, &v.Ciphertext)
			return []any{v.ExchangeID}, err
		},
	},
}

const upstreamCredentials = "SELECT id, kind, base_url, oauth_token_url, credential FROM upstreams WHERE credential IS NOT NULL ORDER BY id"

func scanUpstreamCredential(rows scanner, v *store.Sealed) ([]any, error) {
	err := rows.Scan(&v.UpstreamID, &v.UpstreamKind, &v.BaseURL, &v.OAuthTokenURL, &v.Ciphertext)
	return []any{v.UpstreamID}, err
}

func (s *Store) RebindUpstreamCredentials(ctx context.Context, rebind func(store.Sealed) ([]byte, error)) (int, error) {
	vs, err := list(ctx, s.d, s.pool, func(r scanner, v *store.Sealed) error {
		v.Kind = store.SealedUpstreamCredential
		_, err := scanUpstreamCredential(r, v)
		return err
	}, upstreamCredentials)
	if err != nil {
		return 0, s.d.classify(err)
	}
	n := 0
	for _, v := range vs {
		ct, err := rebind(v)
		if err != nil {
			return n, err
		}
		if ct == nil {
			continue
		}
		ch := audit("rebind_credential", "upstream", v.UpstreamID)
		ch.touch(changeUpstream, v.UpstreamID)
		var w int64
		err = s.tx(ctx, ch, func(tx *txn) (err error) {
			w, err = s.exec(ctx, tx, "UPDATE upstreams SET credential = ? WHERE id = ? AND credential = ? AND base_url = ? AND oauth_token_url = ?",
				ct, v.UpstreamID, v.Ciphertext, v.BaseURL, v.OAuthTokenURL)
			ch.none = w == 0 // changed meanwhile: its writer sealed it
			return err
		})
		if err != nil {
			return n, err
		}
		n += int(w)
	}
	return n, nil
}

func (s *Store) ResealAll(ctx context.Context, reseal func(store.Sealed) ([]byte, error)) (int, error) {
	n := 0
	err := s.tx(ctx, nil, func(tx *txn) error {
		for _, col := range sealedColumns {
			type row struct {
				key []any
				v   store.Sealed
			}
			// Read the column to the end before writing: a connection
			// cannot update while it is still streaming rows.
			todo, err := list(ctx, s.d, tx, func(r scanner, x *row) (err error) {
				x.v.Kind = col.kind
				x.key, err = col.scan(r, &x.v)
				return err
			}, col.query)
			if err != nil {
				return err
			}
			for _, r := range todo {
				if col.kind == store.SealedKeepAliveSnapshot && len(r.v.Ciphertext) <= 1 {
					continue
				}
				ct, err := reseal(r.v)
				if err != nil {
					return err
				}
				if _, err := s.exec(ctx, tx, col.update, append([]any{ct}, r.key...)...); err != nil {
					return err
				}
				n++
			}
		}
		_, err := s.exec(ctx, tx, insertAudit, s.auditArgs(ctx, "rotate_master_key", "master_key", "*", nil)...)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
