package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

const principalCols = `id, name, kind, enabled, revision, allowed_models, default_limits, cache_keepalive, created_at, updated_at, max_in_flight, capture_exchanges`

func scanPrincipal(r scanner, p *store.Principal) error {
	var c principalScan
	return c.scan(r, p)
}

// principalScan reads principals with scratch values that last across
// rows and the JSON columns kept in an arena (see chainScan).
type principalScan struct {
	models, limits string
	ka             sql.NullString
	json           arena
}

func (c *principalScan) scan(r scanner, p *store.Principal) error {
	if err := r.Scan(&p.ID, &p.Name, &p.Kind, &p.Enabled, &p.Revision, &c.models, &c.limits, &c.ka,
		reqTime{&p.CreatedAt}, reqTime{&p.UpdatedAt}, &p.MaxInFlight, &p.CaptureExchanges); err != nil {
		return err
	}
	var ok bool
	if p.AllowedModels, ok = plainStrings(c.models); !ok {
		if err := json.Unmarshal([]byte(c.models), &p.AllowedModels); err != nil {
			return fmt.Errorf("principal %s allowed_models: %w", p.ID, err)
		}
	}
	if p.AllowedModels == nil {
		p.AllowedModels = []string{}
	}
	p.DefaultLimits = c.json.keep(c.limits)
	if c.ka.Valid && c.ka.String != "" && c.ka.String != "null" {
		p.CacheKeepalive = c.json.keep(c.ka.String)
	}
	return nil
}

// principalJoin reads principalCols joined (a full read's).
var principalJoin = newJoinSpec("principals", principalCols, "enabled revision created_at updated_at max_in_flight capture_exchanges", "cache_keepalive", "id", false, "", 0)

var principalTable = &table[store.Principal]{
	sel: "SELECT " + principalCols + " FROM principals ", byID: "WHERE id = ?", order: " ORDER BY created_at, id",
	scan: scanPrincipal, revision: func(p *store.Principal) int64 { return p.Revision },
}

func (s *Store) GetPrincipal(ctx context.Context, id string) (*store.Principal, error) {
	p, err := principalTable.get(ctx, s.d, s.pool, id)
	return p, s.d.classify(err)
}

func (s *Store) ListPrincipals(ctx context.Context) ([]store.Principal, error) {
	ps, err := principalTable.list(ctx, s.d, s.pool, "")
	return ps, s.d.classify(err)
}

func jsonModels(m []string) string {
	if m == nil {
		m = []string{}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func jsonLimits(l json.RawMessage) string {
	if len(l) == 0 || string(l) == "null" {
		return "[]"
	}
	return string(l)
}

func jsonOptional(v json.RawMessage) any {
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	return string(v)
}

func (s *Store) CreatePrincipal(ctx context.Context, p store.Principal) (*store.Principal, error) {
	id := p.ID
	if id == "" {
		id = store.NewID("pr")
	}
	now := s.nowT()
	var out *store.Principal
	ch := audit("create", "principal", id)
	ch.touch(changePrincipal, id)
	err := s.tx(ctx, ch, func(tx *txn) error {
		if _, err := s.exec(ctx, tx, `INSERT INTO principals (id, name, kind, enabled, revision, allowed_models, default_limits,
			cache_keepalive, created_at, updated_at, max_in_flight, capture_exchanges) VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)`,
			id, p.Name, p.Kind, p.Enabled, jsonModels(p.AllowedModels), jsonLimits(p.DefaultLimits),
			jsonOptional(p.CacheKeepalive), s.d.t(now), s.d.t(now), p.MaxInFlight, p.CaptureExchanges); err != nil {
			return err
		}
		// Every principal starts with the built-in router at order 0.
		if _, err := s.exec(ctx, tx, `INSERT INTO plugin_chain_entries (id, principal_id, slot, builtin, wasm_registry_id,
			config, position, enabled, revision, created_at, updated_at) VALUES (?, ?, ?, ?, NULL, '{}', 0, ?, 1, ?, ?)`,
			store.NewID("ce"), id, store.SlotRouter, store.BuiltinSubscriptionPreference, true, s.d.t(now), s.d.t(now)); err != nil {
			return err
		}
		var err error
		out, err = principalTable.reread(ctx, s.d, tx, ch, id)
		return err
	})
	return out, err
}

func (s *Store) updatePrincipal(ctx context.Context, id string, expect int64, set string, args ...any) (*store.Principal, error) {
	var out *store.Principal
	ch := audit("update", "principal", id)
	ch.touch(changePrincipal, id)
	err := s.tx(ctx, ch, func(tx *txn) error {
		if err := s.optimistic(ctx, tx, "principals", "revision", "", id, expect, set, args); err != nil {
			return err
		}
		var err error
		out, err = principalTable.reread(ctx, s.d, tx, ch, id)
		return err
	})
	return out, err
}

func (s *Store) UpdatePrincipal(ctx context.Context, id string, expect int64, p store.Principal) (*store.Principal, error) {
	return s.updatePrincipal(ctx, id, expect, "name = ?, kind = ?, allowed_models = ?, default_limits = ?, cache_keepalive = ?, max_in_flight = ?, capture_exchanges = ?",
		p.Name, p.Kind, jsonModels(p.AllowedModels), jsonLimits(p.DefaultLimits), jsonOptional(p.CacheKeepalive), p.MaxInFlight, p.CaptureExchanges)
}

func (s *Store) PatchPrincipal(ctx context.Context, id string, expect int64, p store.PrincipalPatch) (*store.Principal, error) {
	set := "id = id"
	var args []any
	add := func(col string, v any) {
		set += ", " + col + " = ?"
		args = append(args, v)
	}
	if p.Name != nil {
		add("name", *p.Name)
	}
	if p.Enabled != nil {
		add("enabled", *p.Enabled)
	}
	if p.AllowedModels != nil {
		add("allowed_models", jsonModels(*p.AllowedModels))
	}
	if p.DefaultLimits != nil {
		add("default_limits", jsonLimits(*p.DefaultLimits))
	}
	if p.SetCacheKeepalive {
		add("cache_keepalive", jsonOptional(p.CacheKeepalive))
	}
	if p.MaxInFlight != nil {
		add("max_in_flight", *p.MaxInFlight)
	}
	if p.CaptureExchanges != nil {
		add("capture_exchanges", *p.CaptureExchanges)
	}
	return s.updatePrincipal(ctx, id, expect, set, args...)
}

func (s *Store) DeletePrincipal(ctx context.Context, id string, expect int64) error {
	ch := audit("delete", "principal", id)
	ch.touch(changePrincipal, id)
	return s.tx(ctx, ch, func(tx *txn) error {
		// Children first: SQLite enforces ON DELETE CASCADE only with
		// foreign keys on, and explicit deletes keep both drivers alike.
		n, err := s.exec(ctx, tx, "DELETE FROM principals WHERE id = ? AND (? = 0 OR revision = ?)", id, expect, expect)
		if err != nil {
			return err
		}
		if n == 0 {
			return s.checkRevision(ctx, tx, "principals", "revision", "", id)
		}
		if _, err := s.exec(ctx, tx, "DELETE FROM principal_keys WHERE principal_id = ?", id); err != nil {
			return err
		}
		_, err = s.exec(ctx, tx, "DELETE FROM plugin_chain_entries WHERE principal_id = ?", id)
		return err
	})
}

// plainStrings decodes a JSON array of strings as json.Marshal writes it
// when no string needs an escape (`[]`, `["*"]`, `["a","b-*"]`): what
// allowed_models holds on every principal, decoded at every full read.
// ok is false for anything else, which the caller hands to encoding/json.
func plainStrings(s string) (out []string, ok bool) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, false
	}
	rest := s[1 : len(s)-1]
	if rest == "" {
		return []string{}, true
	}
	out = make([]string, 0, strings.Count(rest, ",")+1)
	for {
		if len(rest) < 2 || rest[0] != '"' {
			return nil, false
		}
		end := strings.IndexByte(rest[1:], '"') + 1
		if end == 0 {
			return nil, false
		}
		v := rest[1:end]
		if strings.IndexByte(v, '\\') >= 0 || !utf8.ValidString(v) || hasControl(v) {
			return nil, false
		}
		out = append(out, v)
		rest = rest[end+1:]
		if rest == "" {
			return out, true
		}
		if rest[0] != ',' {
			return nil, false
		}
		rest = rest[1:]
	}
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 {
			return true
		}
	}
	return false
}
