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
// the log does not cover every one of those generations. Where the
// dialect can batch reads (Dialect.ReadBatch) it is one round trip
// (deltabatch.go); else one statement at a time.
func (s *Store) LoadConfigDelta(ctx context.Context, since int64) (*store.ConfigDelta, error) {
	if s.d.ReadBatch != nil {
		return s.loadDeltaBatched(ctx, since)
	}
	return s.loadDeltaStatements(ctx, since)
}

// changeRow is one row of the change log.
type changeRow struct {
	gen      int64
	kind, id string
}

func scanChange(r scanner, v *changeRow) error { return r.Scan(&v.gen, &v.kind, &v.id) }

// deltaSpan checks the generation read into d against since: done when
// there is nothing to read (the same generation), an error when the
// change log cannot cover the span.
func deltaSpan(d *store.ConfigDelta, since int64) (done bool, err error) {
	switch {
	case d.Generation < since:
		return false, deltaUnavailable("generation %d is behind %d", d.Generation, since)
	case d.Generation == since:
		return true, nil
	case d.Generation-since > changeLogRetention:
		return false, deltaUnavailable("%d generations behind, the change log keeps %d", d.Generation-since, changeLogRetention)
	}
	return false, nil
}

// touchedBy reads the change log rows of the span d covers: the upstreams
// and principals they touched (d.AllUpstreams set for "every upstream"),
// or store.ErrDeltaUnavailable when the rows cannot vouch for the span or
// name too many resources to read one by one.
func touchedBy(d *store.ConfigDelta, since int64, rows []changeRow) (ups, prs map[string]bool, err error) {
	gens := map[int64]bool{}
	ups, prs = map[string]bool{}, map[string]bool{}
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
			// The registry is read whole.
		default:
			return nil, nil, deltaUnavailable("generation %d logged a change of %s %s", r.gen, r.kind, r.id)
		}
	}
	// Every change bumps the generation by one and logs at least one
	// row; a generation without rows was written by a version that
	// keeps no log (or the log was pruned past it).
	if n := d.Generation - since; int64(len(gens)) != n {
		return nil, nil, deltaUnavailable("%d of %d generations after %d are in the change log", len(gens), n, since)
	}
	if len(ups)+len(prs) > maxDeltaResources {
		return nil, nil, deltaUnavailable("%d resources changed", len(ups)+len(prs))
	}
	return ups, prs, nil
}

// loadDeltaStatements is LoadConfigDelta one statement after another: the
// generation, the change log, then the rows it names.
func (s *Store) loadDeltaStatements(ctx context.Context, since int64) (*store.ConfigDelta, error) {
	d := &store.ConfigDelta{From: since}
	err := s.read(ctx, func(tx *txn) error {
		if err := tx.QueryRowContext(ctx, generationQuery).Scan(&d.Generation); err != nil {
			return err
		}
		if done, err := deltaSpan(d, since); done || err != nil {
			return err
		}
		rows, err := list(ctx, s.d, tx, scanChange, changesQuery, since, d.Generation)
		if err != nil {
			return err
		}
		ups, prs, err := touchedBy(d, since, rows)
		if err != nil {
			return err
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

const (
	generationQuery = "SELECT generation FROM config_generation WHERE id = 1"
	changesQuery    = "SELECT generation, kind, id FROM config_changes WHERE generation > ? AND generation <= ?"
)

func (s *Store) readDeltaUpstreams(ctx context.Context, tx *txn, d *store.ConfigDelta, ids map[string]bool) error {
	if d.AllUpstreams {
		us, err := upstreamTable.list(ctx, s.d, tx, "WHERE deleted_at IS NULL")
		sortRows(us, store.CompareUpstreams)
		d.Upstreams = us
		return err
	}
	err := inChunks(sortedKeys(ids), func(in string, args []any) error {
		us, err := upstreamTable.list(ctx, s.d, tx, "WHERE deleted_at IS NULL AND id IN ("+in+")", args...)
		d.Upstreams = append(d.Upstreams, us...)
		return err
	})
	d.RemovedUpstreams = removedUpstreams(d.Upstreams, ids)
	return err
}

// removedUpstreams are the touched ids (sorted) no live upstream has.
func removedUpstreams(live []store.Upstream, touched map[string]bool) []string {
	have := make(map[string]bool, len(live))
	for _, u := range live {
		have[u.ID] = true
	}
	var out []string
	for _, id := range sortedKeys(touched) {
		if !have[id] {
			out = append(out, id)
		}
	}
	return out
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
