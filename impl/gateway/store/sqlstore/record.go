package sqlstore

import (
	"context"
	"slices"
	"strings"
)

// record writes, in tx, ch's audit row, bumps the config generation, logs
// what ch touched under the new generation and announces it.
func (s *Store) record(ctx context.Context, tx *txn, ch *change) error {
	var rev any
	if ch.revision != 0 {
		rev = ch.revision
	}
	args := s.auditArgs(ctx, ch.action, ch.kind, ch.id, rev)
	touched := changeRows(ch.touched)
	var gen int64
	if s.d.NotifyChannel != "" {
		for _, t := range touched {
			args = append(args, t.kind, t.id)
		}
		args = append(args, s.d.NotifyChannel)
		if err := tx.QueryRowContext(ctx, s.d.rebind(recordChangeQuery(len(touched))), args...).Scan(&gen); err != nil {
			return err
		}
	} else {
		if _, err := s.exec(ctx, tx, insertAudit, args...); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, "UPDATE config_generation SET generation = generation + 1 WHERE id = 1 RETURNING generation").Scan(&gen); err != nil {
			return err
		}
		for _, t := range touched {
			if _, err := s.exec(ctx, tx, "INSERT INTO config_changes (generation, kind, id) VALUES (?, ?, ?)", gen, t.kind, t.id); err != nil {
				return err
			}
		}
	}
	// Pruned in steps, not on every change: one range delete per hundred.
	if gen%100 == 0 {
		if _, err := s.exec(ctx, tx, "DELETE FROM config_changes WHERE generation <= ?", gen-changeLogRetention); err != nil {
			return err
		}
	}
	return nil
}

// changeRows are the change log rows of a change that touched these: each
// once, or "*" when it names nothing (a mutation added without its
// touches costs a full rebuild, never a missed change) or too much.
func changeRows(touched []touch) []touch {
	if len(touched) == 0 || len(touched) > maxDeltaResources {
		return []touch{{changeAll, changeAll}}
	}
	out := make([]touch, 0, len(touched))
	for _, t := range touched {
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// recordChangeQuery is record's one statement for n change log rows, on
// databases with data-modifying WITH and NOTIFY: the sub-statements share
// one snapshot, and the log rows take the generation from the bump's
// RETURNING. Parameters: the audit row's (auditArgs), (kind, id) per log row,
// the channel.
func recordChangeQuery(n int) string {
	var b strings.Builder
	b.WriteString(`WITH g AS (UPDATE config_generation SET generation = generation + 1 WHERE id = 1 RETURNING generation),
	a AS (` + insertAudit + `),
	c AS (INSERT INTO config_changes (generation, kind, id) SELECT g.generation, v.kind, v.id FROM g, (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?)")
	}
	b.WriteString(`) AS v (kind, id)),
	n AS (SELECT pg_notify(?, generation::text) FROM g)
SELECT g.generation FROM g, n`)
	return b.String()
}
