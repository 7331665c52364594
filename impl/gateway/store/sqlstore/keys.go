package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

const keyCols = `id, principal_id, name, prefix, hash, created_at, revoked_at`

// keyTable has no revision: keys are issued and revoked, never edited.
var keyTable = &table[store.Key]{
	sel: "SELECT " + keyCols + " FROM principal_keys ", byID: "WHERE id = ?", order: " ORDER BY created_at, id", scan: scanKey,
}

func scanKey(r scanner, k *store.Key) error {
	return r.Scan(&k.ID, &k.PrincipalID, &k.Name, &k.Prefix, &k.Hash, reqTime{&k.CreatedAt}, timeCol{&k.RevokedAt})
}

// liveKeys reads the configuration's narrow key rows (id, principal_id,
// hash) of the live keys matching where ("AND …", or empty), about n of
// them. The hashes share backing arrays of many keys each rather than
// taking one allocation apiece.
func (s *Store) liveKeys(ctx context.Context, q querier, n int, where string, args ...any) ([]store.Key, error) {
	return listSized(ctx, s.d, q, keyScanner(n), n, liveKeysQuery+where, args...)
}

// liveKeysQuery reads live keys; a condition starting with AND follows.
const liveKeysQuery = "SELECT id, principal_id, hash FROM principal_keys WHERE revoked_at IS NULL "

// keyScanner scans the rows of liveKeysQuery, about n of them, copying
// the hashes into shared arenas rather than one allocation each.
func keyScanner(n int) scanFunc[store.Key] {
	hashes := hashArena{n: n}
	var raw sql.RawBytes
	return func(r scanner, k *store.Key) error {
		if err := r.Scan(&k.ID, &k.PrincipalID, &raw); err != nil {
			return err
		}
		k.Hash = hashes.keep(raw)
		return nil
	}
}

// hashArena copies the key hashes of a read of about n keys into shared
// chunks of up to 4,096 hashes; a copy's capacity ends with it.
type hashArena struct {
	buf []byte
	n   int
}

func (a *hashArena) keep(h []byte) []byte {
	if len(a.buf)+len(h) > cap(a.buf) {
		a.buf = make([]byte, 0, max(len(h), min(max(a.n, 64), 4096)*sha256.Size))
	}
	at := len(a.buf)
	a.buf = append(a.buf, h...)
	return a.buf[at:len(a.buf):len(a.buf)]
}

func (s *Store) CreateKey(ctx context.Context, k store.Key) (*store.Key, error) {
	if k.ID == "" {
		k.ID = store.NewID("key")
	}
	k.CreatedAt = s.nowT()
	k.RevokedAt = nil
	ch := audit("issue", "key", k.ID)
	ch.touch(changePrincipal, k.PrincipalID)
	err := s.tx(ctx, ch, func(tx *txn) error {
		if _, err := principalTable.get(ctx, s.d, tx, k.PrincipalID); err != nil {
			return err
		}
		_, err := s.exec(ctx, tx, "INSERT INTO principal_keys (id, principal_id, name, prefix, hash, created_at) VALUES (?, ?, ?, ?, ?, ?)",
			k.ID, k.PrincipalID, k.Name, k.Prefix, k.Hash, s.d.t(k.CreatedAt))
		if err != nil && s.d.IsForeignKey != nil && s.d.IsForeignKey(err) {
			// The principal was deleted after the check above.
			return fmt.Errorf("principal %s: %w", k.PrincipalID, store.ErrNotFound)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &k, nil
}

func (s *Store) ListKeys(ctx context.Context, principalID string) ([]store.Key, error) {
	if _, err := s.GetPrincipal(ctx, principalID); err != nil {
		return nil, err
	}
	ks, err := keyTable.list(ctx, s.d, s.pool, "WHERE principal_id = ?", principalID)
	return ks, s.d.classify(err)
}

func (s *Store) RevokeKey(ctx context.Context, principalID, keyID string) (*store.Key, error) {
	var out *store.Key
	ch := audit("revoke", "key", keyID)
	ch.touch(changePrincipal, principalID)
	err := s.tx(ctx, ch, func(tx *txn) error {
		n, err := s.exec(ctx, tx, "UPDATE principal_keys SET revoked_at = ? WHERE id = ? AND principal_id = ? AND revoked_at IS NULL",
			s.d.t(s.nowT()), keyID, principalID)
		if err != nil {
			return err
		}
		ch.none = n == 0 // already revoked (or missing): not a change
		out, err = one(ctx, s.d, tx, scanKey, keyTable.sel+"WHERE id = ? AND principal_id = ?"+keyTable.order, keyID, principalID)
		return err
	})
	return out, err
}
