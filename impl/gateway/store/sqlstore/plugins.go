package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"sort"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// ------------------------------------------------------ plugin registry

const registryCols = `r.id, r.name, r.version, r.digest, r.slots, r.size_bytes, r.revision, r.created_at, r.updated_at,
	(SELECT count(*) FROM plugin_chain_entries c WHERE c.wasm_registry_id = r.id) +
	(SELECT count(*) FROM upstreams u WHERE u.warmup_dialect_plugin = r.id AND u.deleted_at IS NULL)`

func scanRegistry(r scanner, e *store.RegistryEntry) error {
	var version sql.NullString
	var slots string
	if err := r.Scan(&e.ID, &e.Name, &version, &e.Digest, &slots, &e.SizeBytes, &e.Revision, reqTime{&e.CreatedAt},
		reqTime{&e.UpdatedAt}, &e.Refcount); err != nil {
		return err
	}
	if version.Valid {
		e.Version = &version.String
	}
	_ = json.Unmarshal([]byte(slots), &e.Slots)
	return nil
}

var registryTable = &table[store.RegistryEntry]{
	sel: "SELECT " + registryCols + " FROM plugin_registry r ", byID: "WHERE r.id = ?", order: " ORDER BY r.created_at, r.id",
	scan: scanRegistry, revision: func(e *store.RegistryEntry) int64 { return e.Revision },
}

func versionKey(v *string) string {
	if v == nil {
		return "\x00" // no version: unique on its own
	}
	return *v
}

func (s *Store) CreateRegistryEntry(ctx context.Context, e store.RegistryEntry, module []byte) (*store.RegistryEntry, error) {
	id := e.ID
	if id == "" {
		id = store.NewID("wasm")
	}
	slots, _ := json.Marshal(e.Slots)
	var out *store.RegistryEntry
	ch := audit("create", "plugin_registry_entry", id)
	ch.touch(changeRegistry, id)
	err := s.tx(ctx, ch, func(tx *txn) error {
		now := s.d.t(s.nowT())
		var version any
		if e.Version != nil {
			version = *e.Version
		}
		if _, err := s.exec(ctx, tx, `INSERT INTO plugin_registry (id, name, version, version_key, digest, slots, module, size_bytes, revision, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`, id, e.Name, version, versionKey(e.Version), e.Digest, string(slots), module, len(module), now, now); err != nil {
			return err
		}
		var err error
		out, err = registryTable.reread(ctx, s.d, tx, ch, id)
		return err
	})
	return out, err
}

func (s *Store) GetRegistryEntry(ctx context.Context, id string) (*store.RegistryEntry, error) {
	e, err := registryTable.get(ctx, s.d, s.pool, id)
	return e, s.d.classify(err)
}

func (s *Store) ListRegistryEntries(ctx context.Context) ([]store.RegistryEntry, error) {
	es, err := registryTable.list(ctx, s.d, s.pool, "")
	return es, s.d.classify(err)
}

func (s *Store) RegistryModule(ctx context.Context, id string) ([]byte, error) {
	m, err := one(ctx, s.d, s.pool, func(r scanner, m *[]byte) error { return r.Scan(m) }, "SELECT module FROM plugin_registry WHERE id = ?", id)
	if err != nil {
		return nil, s.d.classify(err)
	}
	return *m, nil
}

func (s *Store) PatchRegistryEntry(ctx context.Context, id string, expect int64, name, version *string) (*store.RegistryEntry, error) {
	var out *store.RegistryEntry
	ch := audit("update", "plugin_registry_entry", id)
	ch.touch(changeRegistry, id)
	err := s.tx(ctx, ch, func(tx *txn) error {
		cur, err := registryTable.get(ctx, s.d, tx, id)
		if err != nil {
			return err
		}
		if name == nil {
			name = &cur.Name
		}
		if version == nil {
			version = cur.Version
		} else if *version == "" {
			version = nil
		}
		var v any
		if version != nil {
			v = *version
		}
		all := []any{*name, v, versionKey(version), s.d.t(s.nowT()), id, expect, expect}
		n, err := s.exec(ctx, tx, `UPDATE plugin_registry SET name = ?, version = ?, version_key = ?, revision = revision + 1, updated_at = ?
			WHERE id = ? AND (? = 0 OR revision = ?)`, all...)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrStaleRevision
		}
		out, err = registryTable.reread(ctx, s.d, tx, ch, id)
		return err
	})
	return out, err
}

func (s *Store) registryRefs(ctx context.Context, tx querier, id string) ([]store.Reference, error) {
	var refs []store.Reference
	chains, err := s.queryChain(ctx, tx, "WHERE wasm_registry_id = ?", id)
	if err != nil {
		return nil, err
	}
	for _, c := range chains {
		refs = append(refs, store.Reference{Kind: "plugin_chain_entry", ID: c.ID, Owner: c.PrincipalID})
	}
	ups, err := upstreamTable.list(ctx, s.d, tx, "WHERE warmup_dialect_plugin = ? AND deleted_at IS NULL", id)
	if err != nil {
		return nil, err
	}
	for _, u := range ups {
		refs = append(refs, store.Reference{Kind: "upstream", ID: u.ID})
	}
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].Kind != refs[j].Kind {
			return refs[i].Kind < refs[j].Kind
		}
		return refs[i].ID < refs[j].ID
	})
	if refs == nil {
		refs = []store.Reference{}
	}
	return refs, nil
}

func (s *Store) RegistryReferences(ctx context.Context, id string) ([]store.Reference, error) {
	var refs []store.Reference
	err := s.read(ctx, func(tx *txn) error {
		if _, err := registryTable.get(ctx, s.d, tx, id); err != nil {
			return err
		}
		var err error
		refs, err = s.registryRefs(ctx, tx, id)
		return err
	})
	return refs, err
}

func (s *Store) DeleteRegistryEntry(ctx context.Context, id string, expect int64, cascade bool, fingerprint string) ([]store.Reference, error) {
	var removed []store.Reference
	ch := audit("delete", "plugin_registry_entry", id)
	ch.touch(changeRegistry, id)
	err := s.tx(ctx, ch, func(tx *txn) error {
		// Lock the entry first: concurrent binders check it in their own
		// transaction and wait for this one.
		cur, err := registryTable.get(ctx, s.d, tx, id)
		if err != nil {
			return err
		}
		if s.d.Name == "postgres" {
			if _, err := s.exec(ctx, tx, "SELECT id FROM plugin_registry WHERE id = ? FOR UPDATE", id); err != nil {
				return err
			}
		}
		if expect != store.AnyRevision && cur.Revision != expect {
			return store.ErrStaleRevision
		}
		ch.revision = cur.Revision
		refs, err := s.registryRefs(ctx, tx, id)
		if err != nil {
			return err
		}
		if !cascade {
			if len(refs) > 0 {
				return &store.ReferencedError{References: refs}
			}
		} else {
			if fingerprint != store.ReferenceFingerprint(refs) {
				return store.ErrReferencesChanged
			}
			if _, err := s.exec(ctx, tx, "DELETE FROM plugin_chain_entries WHERE wasm_registry_id = ?", id); err != nil {
				return err
			}
			// Unbinding a dialect is a change of the upstream's spec.
			if _, err := s.exec(ctx, tx, `UPDATE upstreams SET warmup_dialect_plugin = NULL, spec_revision = spec_revision + 1, updated_at = ?
				WHERE warmup_dialect_plugin = ? AND deleted_at IS NULL`, s.d.t(s.nowT()), id); err != nil {
				return err
			}
			removed = refs
			for _, r := range refs {
				if r.Kind == "upstream" {
					ch.touch(changeUpstream, r.ID)
				} else {
					ch.touch(changePrincipal, r.Owner)
				}
			}
		}
		_, err = s.exec(ctx, tx, "DELETE FROM plugin_registry WHERE id = ?", id)
		return err
	})
	return removed, err
}

// ---------------------------------------------------------------- chains

const chainCols = `id, principal_id, slot, builtin, wasm_registry_id, config, position, enabled,
	revision, created_at, updated_at`

func scanChainEntry(r scanner, e *store.ChainEntry) error {
	var c chainScan
	return c.scan(r, e)
}

// chainScan reads chain entries. Its scratch values last across rows
// (each value Scan is handed the address of moves to the heap: one
// allocation per value and row otherwise), consecutive entries share the
// string of an equal built-in name, and the configs share an arena.
type chainScan struct {
	builtin, wasm sql.NullString
	cfg           string
	last          *string
	configs       arena
}

func (c *chainScan) scan(r scanner, e *store.ChainEntry) error {
	if err := r.Scan(&e.ID, &e.PrincipalID, &e.Slot, &c.builtin, &c.wasm, &c.cfg, &e.Position, &e.Enabled, &e.Revision,
		reqTime{&e.CreatedAt}, reqTime{&e.UpdatedAt}); err != nil {
		return err
	}
	if c.builtin.Valid {
		if c.last == nil || *c.last != c.builtin.String {
			b := c.builtin.String
			c.last = &b
		}
		e.Builtin = c.last
	}
	if c.wasm.Valid {
		w := c.wasm.String
		e.WasmRegistryID = &w
	}
	e.Config = c.configs.keep(c.cfg)
	return nil
}

// chainTable lists in no SQL order: queryChain sorts.
var chainTable = &table[store.ChainEntry]{
	sel: "SELECT " + chainCols + " FROM plugin_chain_entries ", byID: "WHERE id = ?",
	scan: scanChainEntry, revision: func(e *store.ChainEntry) int64 { return e.Revision },
}

// chainJoin reads chainCols joined (a full read's).
var chainJoin = newJoinSpec("plugin_chain_entries", chainCols, "position enabled revision created_at updated_at", "builtin wasm_registry_id", "id", false, "", 0)

// queryChain returns entries in chain order: by principal, slot, position.
func (s *Store) queryChain(ctx context.Context, q querier, where string, args ...any) ([]store.ChainEntry, error) {
	return s.queryChainSized(ctx, q, nil, 0, where, args...)
}

// queryChainSized is queryChain for about n entries, joined by sp (when
// not nil) where the dialect joins rows.
func (s *Store) queryChainSized(ctx context.Context, q querier, sp *joinSpec, n int, where string, args ...any) ([]store.ChainEntry, error) {
	var c chainScan
	out, err := fullList(ctx, s, q, sp, c.scan, n, chainTable.sel, where+chainTable.order, args...)
	if err != nil {
		return nil, err
	}
	sortRows(out, store.CompareChainEntries)
	return out, nil
}

// checkSlot verifies, inside tx, that a registry entry exists and supports
// slot; on PostgreSQL it share-locks the row so a concurrent delete waits.
func (s *Store) checkSlot(ctx context.Context, tx *txn, registryID, slot string) error {
	if s.d.ForShare != "" {
		if _, err := s.exec(ctx, tx, "SELECT id FROM plugin_registry WHERE id = ?"+s.d.ForShare, registryID); err != nil {
			return err
		}
	}
	es, err := registryTable.list(ctx, s.d, tx, "WHERE r.id = ?", registryID)
	if err != nil {
		return err
	}
	if len(es) == 0 {
		return &store.SlotError{RegistryID: registryID, Slot: slot, Unknown: true}
	}
	for _, sl := range es[0].Slots {
		if sl == slot {
			return nil
		}
	}
	return &store.SlotError{RegistryID: registryID, Slot: slot}
}

func (s *Store) InsertChainEntry(ctx context.Context, principalID string, e store.ChainEntry, position *int64) (*store.ChainEntry, error) {
	id := store.NewID("pce")
	if len(e.Config) == 0 {
		e.Config = json.RawMessage("{}")
	}
	var out *store.ChainEntry
	ch := audit("create", "plugin_chain_entry", id)
	ch.touch(changePrincipal, principalID)
	err := s.tx(ctx, ch, func(tx *txn) error {
		if _, err := principalTable.get(ctx, s.d, tx, principalID); err != nil {
			return err
		}
		if e.WasmRegistryID == nil {
			return &store.SlotError{Slot: e.Slot, Unknown: true}
		}
		if err := s.checkSlot(ctx, tx, *e.WasmRegistryID, e.Slot); err != nil {
			return err
		}
		chain, err := s.queryChain(ctx, tx, "WHERE principal_id = ? AND slot = ?", principalID, e.Slot)
		if err != nil {
			return err
		}
		for _, c := range chain {
			if c.WasmRegistryID != nil && *c.WasmRegistryID == *e.WasmRegistryID {
				return store.ErrConflict
			}
		}
		now := s.d.t(s.nowT())
		var pos int64
		if position == nil {
			pos = 0
			for _, c := range chain {
				pos = max(pos, c.Position+1)
			}
		} else {
			pos = *position
			// Make room: entries at or after pos move one down.
			if _, err := s.exec(ctx, tx, `UPDATE plugin_chain_entries SET position = position + 1, revision = revision + 1, updated_at = ?
				WHERE principal_id = ? AND slot = ? AND position >= ?`, now, principalID, e.Slot, pos); err != nil {
				return err
			}
		}
		if _, err := s.exec(ctx, tx, `INSERT INTO plugin_chain_entries (id, principal_id, slot, builtin, wasm_registry_id, config, position, enabled, revision, created_at, updated_at)
			VALUES (?, ?, ?, NULL, ?, ?, ?, ?, 1, ?, ?)`, id, principalID, e.Slot, *e.WasmRegistryID, string(e.Config), pos, true, now, now); err != nil {
			return err
		}
		out, err = chainTable.reread(ctx, s.d, tx, ch, id)
		return err
	})
	return out, err
}

func (s *Store) ReorderChain(ctx context.Context, principalID, slot string, order []store.ChainRef) ([]store.ChainEntry, error) {
	var out []store.ChainEntry
	ch := audit("reorder", "plugin_chain", principalID)
	ch.touch(changePrincipal, principalID)
	err := s.tx(ctx, ch, func(tx *txn) error {
		if _, err := principalTable.get(ctx, s.d, tx, principalID); err != nil {
			return err
		}
		chain, err := s.queryChain(ctx, tx, "WHERE principal_id = ? AND slot = ?"+s.d.ForUpdate, principalID, slot)
		if err != nil {
			return err
		}
		cur := map[string]int64{}
		for _, c := range chain {
			cur[c.ID] = c.Revision
		}
		seen := map[string]bool{}
		for _, r := range order {
			rev, ok := cur[r.ID]
			if !ok || seen[r.ID] {
				return &store.OrderError{Message: "order must list each entry of the chain exactly once"}
			}
			seen[r.ID] = true
			if r.Revision != rev {
				return store.ErrStaleRevision
			}
		}
		if len(order) != len(chain) {
			return &store.OrderError{Message: "order must list every entry of the chain"}
		}
		now := s.d.t(s.nowT())
		for i, r := range order {
			if _, err := s.exec(ctx, tx, `UPDATE plugin_chain_entries SET position = ?, revision = revision + 1, updated_at = ? WHERE id = ?`,
				int64(i), now, r.ID); err != nil {
				return err
			}
		}
		out, err = s.queryChain(ctx, tx, "WHERE principal_id = ? AND slot = ?", principalID, slot)
		return err
	})
	return out, err
}

func (s *Store) RebalanceChain(ctx context.Context, principalID string) ([]store.ChainEntry, error) {
	var out []store.ChainEntry
	ch := audit("rebalance", "plugin_chain", principalID)
	ch.touch(changePrincipal, principalID)
	err := s.tx(ctx, ch, func(tx *txn) error {
		if _, err := principalTable.get(ctx, s.d, tx, principalID); err != nil {
			return err
		}
		chain, err := s.queryChain(ctx, tx, "WHERE principal_id = ?"+s.d.ForUpdate, principalID)
		if err != nil {
			return err
		}
		now := s.d.t(s.nowT())
		slotIndex := map[string]int64{}
		changed := false
		for _, c := range chain {
			pos := slotIndex[c.Slot] * 10
			slotIndex[c.Slot]++
			if c.Position == pos {
				continue
			}
			changed = true
			if _, err := s.exec(ctx, tx, `UPDATE plugin_chain_entries SET position = ?, revision = revision + 1, updated_at = ? WHERE id = ?`,
				pos, now, c.ID); err != nil {
				return err
			}
		}
		ch.none = !changed
		out, err = s.queryChain(ctx, tx, "WHERE principal_id = ?", principalID)
		return err
	})
	return out, err
}

func (s *Store) ListChain(ctx context.Context, principalID string) ([]store.ChainEntry, error) {
	if _, err := s.GetPrincipal(ctx, principalID); err != nil {
		return nil, err
	}
	es, err := s.queryChain(ctx, s.pool, "WHERE principal_id = ?", principalID)
	return es, s.d.classify(err)
}

func (s *Store) UpdateChainEntry(ctx context.Context, id string, expect int64, config json.RawMessage, enabled bool) (*store.ChainEntry, error) {
	if len(config) == 0 {
		config = json.RawMessage("{}")
	}
	var out *store.ChainEntry
	ch := audit("update", "plugin_chain_entry", id)
	err := s.tx(ctx, ch, func(tx *txn) error {
		if err := s.optimistic(ctx, tx, "plugin_chain_entries", "revision", "", id, expect, "config = ?, enabled = ?", []any{string(config), enabled}); err != nil {
			return err
		}
		var err error
		out, err = chainTable.reread(ctx, s.d, tx, ch, id)
		if err == nil {
			ch.touch(changePrincipal, out.PrincipalID)
		}
		return err
	})
	return out, err
}

func (s *Store) GetChainEntry(ctx context.Context, id string) (*store.ChainEntry, error) {
	e, err := chainTable.get(ctx, s.d, s.pool, id)
	return e, s.d.classify(err)
}

func (s *Store) DeleteChainEntry(ctx context.Context, id string, expect int64) error {
	ch := audit("delete", "plugin_chain_entry", id)
	return s.tx(ctx, ch, func(tx *txn) error {
		cur, err := chainTable.get(ctx, s.d, tx, id)
		if err != nil {
			return err
		}
		ch.touch(changePrincipal, cur.PrincipalID)
		n, err := s.exec(ctx, tx, "DELETE FROM plugin_chain_entries WHERE id = ? AND (? = 0 OR revision = ?)", id, expect, expect)
		if err != nil {
			return err
		}
		if n == 0 {
			return store.ErrStaleRevision
		}
		return nil
	})
}
