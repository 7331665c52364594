package sqlstore

import (
	"context"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// ------------------------------------------------------ captured exchanges

const captureCols = "event_id, principal_id, at, request_bytes, response_bytes, truncated, sealed"

// captureIDsPerQuery bounds the ids of one CapturedEventIDs statement
// (a request-log page is far smaller).
const captureIDsPerQuery = 500

func (s *Store) InsertCapturedExchanges(ctx context.Context, xs []store.CapturedExchange) error {
	if len(xs) == 0 {
		return nil
	}
	return s.d.classify(s.tx(ctx, nil, func(tx *txn) error {
		for _, x := range xs {
			if _, err := s.exec(ctx, tx, "INSERT INTO captured_exchanges ("+captureCols+") VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (event_id) DO NOTHING",
				x.EventID, x.PrincipalID, s.d.t(x.At), x.RequestBytes, x.ResponseBytes, x.Truncated, x.Sealed); err != nil {
				return err
			}
		}
		return nil
	}))
}

func (s *Store) GetCapturedExchange(ctx context.Context, eventID string) (*store.CapturedExchange, error) {
	x, err := s.getCapture(ctx, s.pool, eventID)
	return x, s.d.classify(err)
}

func (s *Store) ReadCapturedExchange(ctx context.Context, eventID string) (*store.CapturedExchange, error) {
	var out *store.CapturedExchange
	err := s.tx(ctx, nil, func(tx *txn) (err error) {
		if out, err = s.getCapture(ctx, tx, eventID); err != nil {
			return err
		}
		_, err = s.exec(ctx, tx, insertAudit, s.auditArgs(ctx, "read", "captured_exchange", eventID, nil)...)
		return err
	})
	return out, s.d.classify(err)
}

func (s *Store) getCapture(ctx context.Context, q querier, eventID string) (*store.CapturedExchange, error) {
	xs, err := list(ctx, s.d, q, func(r scanner, x *store.CapturedExchange) error {
		return r.Scan(&x.EventID, &x.PrincipalID, reqTime{&x.At}, &x.RequestBytes, &x.ResponseBytes, &x.Truncated, &x.Sealed)
	}, "SELECT "+captureCols+" FROM captured_exchanges WHERE event_id = ?", eventID)
	if err != nil {
		return nil, err
	}
	if len(xs) == 0 {
		return nil, store.ErrNotFound
	}
	return &xs[0], nil
}

func (s *Store) CapturedEventIDs(ctx context.Context, ids []string) (map[string]bool, error) {
	out := make(map[string]bool)
	for len(ids) > 0 {
		n := min(len(ids), captureIDsPerQuery)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		found, err := list(ctx, s.d, s.pool, func(r scanner, id *string) error { return r.Scan(id) },
			"SELECT event_id FROM captured_exchanges WHERE event_id IN ("+strings.TrimSuffix(strings.Repeat("?, ", n), ", ")+")", args...)
		if err != nil {
			return nil, s.d.classify(err)
		}
		for _, id := range found {
			out[id] = true
		}
		ids = ids[n:]
	}
	return out, nil
}
