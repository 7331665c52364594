package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// BatchRows is one statement's result in a batch (Dialect.ReadBatch).
type BatchRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// BatchQuery is one statement of a batch: its text, with the dialect's
// placeholders, its arguments, and what reads its rows.
type BatchQuery struct {
	SQL  string
	Args []any
	Read func(BatchRows) error
}

// The statements of the batched delta read cannot wait for the change log
// to name the touched rows: each finds them itself with a subquery on the
// log. Their transaction's one snapshot keeps them consistent with the
// generation and log rows read beside them, which are checked afterwards
// exactly as loadDeltaStatements checks them.
var (
	// deltaSpanSQL is the change log's span after generation ? (the one
	// argument) up to the generation read in the same snapshot.
	deltaSpanSQL = "generation > ? AND generation <= (" + generationQuery + ")"
	// deltaBoundSQL holds when the span names no more resources than a
	// delta reads (maxDeltaResources): past that the delta is refused, so
	// reading the rows would be in vain. One argument: the generation.
	deltaBoundSQL = fmt.Sprintf("(SELECT count(*) FROM (SELECT DISTINCT kind, id FROM config_changes WHERE %s "+
		"AND kind IN ('%s', '%s') AND id <> '%s') s) <= %d", deltaSpanSQL, changeUpstream, changePrincipal, changeAll, maxDeltaResources)
)

// touchedRows reads, with sel (a table's SELECT up to its WHERE clause)
// and cond (its condition on the touched id, c.touched_id), the rows of
// the ids of kind the span names, none past the bound; two arguments,
// both the generation. Each id is looked up on its own (LATERAL, kept from being
// merged into a join by OFFSET 0): as a join or an IN subquery the
// planner, counting on a few ids, scanned the whole table to hash them.
// (Batches are PostgreSQL's: so is LATERAL.)
func touchedRows(kind, sel, cond string) string {
	return fmt.Sprintf("SELECT t.* FROM (SELECT DISTINCT id AS touched_id FROM config_changes WHERE %s AND kind = '%s' AND id <> '%s' AND %s) c, "+
		"LATERAL (%s%s OFFSET 0) t ", deltaSpanSQL, kind, changeAll, deltaBoundSQL, sel, cond)
}

// readAll appends every row, scanned by scan, to *dst.
func readAll[T any](dst *[]T, scan scanFunc[T]) func(BatchRows) error {
	return func(r BatchRows) error {
		var zero T
		sc := &rowScanner{raw: r}
		for r.Next() {
			*dst = append(*dst, zero)
			if err := scan(sc, &(*dst)[len(*dst)-1]); err != nil {
				return err
			}
		}
		return r.Err()
	}
}

// loadDeltaBatched is LoadConfigDelta in one batch: the generation, the
// change log and the rows of what it names read together, then checked.
// A delta the log cannot vouch for is refused as loadDeltaStatements
// refuses it; the rows read with it are dropped.
func (s *Store) loadDeltaBatched(ctx context.Context, since int64) (*store.ConfigDelta, error) {
	d := &store.ConfigDelta{From: since}
	var (
		gens    []int64
		changes []changeRow
		ups     []store.Upstream
		all     []store.Upstream // when a change touched every upstream
		plugins = []store.RegistryEntry{}
	)
	bound := []any{since, since}
	qs := []BatchQuery{
		{SQL: generationQuery, Read: readAll(&gens, func(r scanner, g *int64) error { return r.Scan(g) })},
		{SQL: "SELECT generation, kind, id FROM config_changes WHERE " + deltaSpanSQL, Args: []any{since}, Read: readAll(&changes, scanChange)},
		{SQL: touchedRows(changeUpstream, upstreamTable.sel, "WHERE deleted_at IS NULL AND id = c.touched_id") + upstreamTable.order,
			Args: bound, Read: readAll(&ups, upstreamTable.scan)},
		{SQL: upstreamTable.sel + "WHERE deleted_at IS NULL AND EXISTS (SELECT 1 FROM config_changes WHERE " + deltaSpanSQL +
			" AND kind = '" + changeUpstream + "' AND id = '" + changeAll + "')" + upstreamTable.order, Args: []any{since}, Read: readAll(&all, upstreamTable.scan)},
		{SQL: touchedRows(changePrincipal, principalTable.sel, "WHERE id = c.touched_id") + principalTable.order, Args: bound,
			Read: readAll(&d.Principals, principalTable.scan)},
		{SQL: touchedRows(changePrincipal, liveKeysQuery, "AND principal_id = c.touched_id"), Args: bound, Read: readAll(&d.Keys, keyScanner(0))},
		{SQL: touchedRows(changePrincipal, chainTable.sel, "WHERE principal_id = c.touched_id"), Args: bound,
			Read: readAll(&d.Chains, chainTable.scan)},
		{SQL: registryTable.sel + registryTable.order, Read: readAll(&plugins, registryTable.scan)},
	}
	for i := range qs {
		qs[i].SQL = s.d.rebind(qs[i].SQL)
	}
	if err := s.d.ReadBatch(ctx, s.db, qs); errors.Is(err, errors.ErrUnsupported) {
		return s.loadDeltaStatements(ctx, since)
	} else if err != nil {
		return nil, s.d.classify(err)
	}
	if len(gens) != 1 {
		return nil, fmt.Errorf("config_generation: %d rows", len(gens))
	}
	d.Generation = gens[0]
	if done, err := deltaSpan(d, since); err != nil {
		return nil, err
	} else if done {
		return &store.ConfigDelta{From: since, Generation: since}, nil
	}
	upIDs, prIDs, err := touchedBy(d, since, changes)
	if err != nil {
		return nil, err
	}
	// What loadDeltaStatements returns, to the nil or empty list.
	if d.AllUpstreams {
		d.Upstreams = all
		if d.Upstreams == nil {
			d.Upstreams = []store.Upstream{}
		}
		sortRows(d.Upstreams, store.CompareUpstreams)
	} else {
		d.Upstreams = ups
		d.RemovedUpstreams = removedUpstreams(ups, upIDs)
	}
	d.PrincipalIDs = sortedKeys(prIDs)
	sortRows(d.Chains, store.CompareChainEntries)
	d.Plugins = plugins
	return d, nil
}
