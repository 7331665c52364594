package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// maxDeltaResources bounds a delta: past this many touched upstreams and
// principals, reading them one by one costs about what a full load does.
const maxDeltaResources = 2000

// inChunk is how many ids one IN (...) list carries.
const inChunk = 500

func deltaUnavailable(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{store.ErrDeltaUnavailable}, args...)...)
}

// LoadConfigDelta reads, in one snapshot transaction, what changed after
// generation since: the rows of every resource the change log names for
// the generations after it. It fails with store.ErrDeltaUnavailable when
// the log does not cover every one of those generations.
func (s *Store) LoadConfigDelta(ctx context.Context, since int64) (*store.ConfigDelta, error) {
	d := &store.ConfigDelta{From: since}
	err := s.read(ctx, func(tx *txn) error {
		if err := tx.QueryRowContext(ctx, "SELECT generation FROM config_generation WHERE id = 1").Scan(&d.Generation); err != nil {
			return err
		}
		switch {
		case d.Generation < since:
			return deltaUnavailable("generation %d is behind %d", d.Generation, since)
		case d.Generation == since:
			return nil
		case d.Generation-since > changeLogRetention:
			return deltaUnavailable("%d generations behind, the change log keeps %d", d.Generation-since, changeLogRetention)
		}
		type logRow struct {
			gen      int64
			kind, id string
		}
		rows, err := list(ctx, s.d, tx, func(r scanner, v *logRow) error { return r.Scan(&v.gen, &v.kind, &v.id) },
			"SELECT generation, kind, id FROM config_changes WHERE generation > ? AND generation <= ?", since, d.Generation)
		if err != nil {
			return err
		}
		gens := map[int64]bool{}
		ups, prs := map[string]bool{}, map[string]bool{}
		for _, r := range rows {
			gens[r.gen] = true
			switch {
			case r.kind == changeUpstream && r.id == changeAll:
				d.AllUpstreams = true
			case r.kind == changeUpstream:
				ups[r.id] = true
			case r.kind == changePrincipal && r.id != changeAll:
				prs[r.id] = true
			case r.kind == changeRegistry:
				// The registry is read whole below.
			default:
				return deltaUnavailable("generation %d logged a change of %s %s", r.gen, r.kind, r.id)
			}
		}
		// Every change bumps the generation by one and logs at least one
		// row; a generation without rows was written by a version that
		// keeps no log (or the log was pruned past it).
		if n := d.Generation - since; int64(len(gens)) != n {
			return deltaUnavailable("%d of %d generations after %d are in the change log", len(gens), n, since)
		}
		if len(ups)+len(prs) > maxDeltaResources {
			return deltaUnavailable("%d resources changed", len(ups)+len(prs))
		}
		if err := s.readDeltaUpstreams(ctx, tx, d, ups); err != nil {
			return err
		}
		if err := s.readDeltaPrincipals(ctx, tx, d, prs); err != nil {
			return err
		}
		d.Plugins, err = registryTable.list(ctx, s.d, tx, "")
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (s *Store) readDeltaUpstreams(ctx context.Context, tx *txn, d *store.ConfigDelta, ids map[string]bool) error {
	if d.AllUpstreams {
		us, err := upstreamTable.list(ctx, s.d, tx, "WHERE deleted_at IS NULL")
		sortRows(us, store.CompareUpstreams)
		d.Upstreams = us
		return err
	}
	live := map[string]bool{}
	err := inChunks(sortedKeys(ids), func(in string, args []any) error {
		us, err := upstreamTable.list(ctx, s.d, tx, "WHERE deleted_at IS NULL AND id IN ("+in+")", args...)
		for _, u := range us {
			live[u.ID] = true
		}
		d.Upstreams = append(d.Upstreams, us...)
		return err
	})
	for _, id := range sortedKeys(ids) {
		if !live[id] {
			d.RemovedUpstreams = append(d.RemovedUpstreams, id)
		}
	}
	return err
}

func (s *Store) readDeltaPrincipals(ctx context.Context, tx *txn, d *store.ConfigDelta, ids map[string]bool) error {
	d.PrincipalIDs = sortedKeys(ids)
	return inChunks(d.PrincipalIDs, func(in string, args []any) error {
		ps, err := principalTable.list(ctx, s.d, tx, "WHERE id IN ("+in+")", args...)
		if err != nil {
			return err
		}
		d.Principals = append(d.Principals, ps...)
		ks, err := s.liveKeys(ctx, tx, 0, "AND principal_id IN ("+in+")", args...)
		if err != nil {
			return err
		}
		d.Keys = append(d.Keys, ks...)
		cs, err := s.queryChain(ctx, tx, "WHERE principal_id IN ("+in+")", args...)
		d.Chains = append(d.Chains, cs...)
		return err
	})
}

// inChunks calls fn with "?, ?, …" and its arguments for each chunk of ids.
func inChunks(ids []string, fn func(in string, args []any) error) error {
	for len(ids) > 0 {
		n := min(len(ids), inChunk)
		args := make([]any, n)
		for i, id := range ids[:n] {
			args[i] = id
		}
		if err := fn(strings.TrimSuffix(strings.Repeat("?, ", n), ", "), args); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
