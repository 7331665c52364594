package snapshot

import (
	"crypto/sha256"
	"maps"
	"slices"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Apply builds the snapshot of cfg, which is prev's configuration with d
// applied (store.Config.Apply), from prev: what d did not touch is shared
// with prev or copied from it, never modified, so readers holding prev are
// unaffected. Principals, keys and chains d touched are re-derived from
// its rows. When upstreams changed, every principal's candidates may have
// moved: the untouched principals are copied with their candidates
// resolved again and their keys re-pointed, without re-reading or
// re-parsing them. A change of what routers know of plugins (a renamed or
// removed registry entry) is built in full from cfg.
func Apply(prev *Snapshot, cfg *store.Config, d *store.ConfigDelta, open Opener, now time.Time) *Snapshot {
	if !sameRouterPlugins(prev.Plugins, cfg.Plugins) {
		if cfg.KeysOmitted {
			full := *cfg
			full.Keys, full.KeysOmitted = keysAfter(prev, d), false
			cfg = &full
		}
		return Build(cfg, open, now)
	}
	s := &Snapshot{
		Generation: cfg.Generation, BuiltAt: now,
		// Shared while the upstreams do not change, with the lists derived from them.
		Upstreams: prev.Upstreams, upstreamID: prev.upstreamID, Errors: prev.Errors, Usable: prev.Usable, routes: prev.routes,
		keys: new([keyShards]map[[sha256.Size]byte]*Key),
	}
	*s.keys = *prev.keys
	s.setPlugins(cfg.Plugins)
	// A shard is copied the first time this rebuild writes to it.
	own := [keyShards]bool{}
	shard := func(b byte) map[[sha256.Size]byte]*Key {
		if !own[b] {
			s.keys[b] = maps.Clone(s.keys[b])
			own[b] = true
		}
		return s.keys[b]
	}
	touched := make(map[string]bool, len(d.PrincipalIDs))
	for _, id := range d.PrincipalIDs {
		touched[id] = true
	}
	memo := routesMemo{shared: s.routes}
	if d.UpstreamsChanged() {
		s.applyUpstreams(prev, cfg, d, open)
		memo = routesMemo{shared: map[string][]*Upstream{}, owned: true}
		s.rebasePrincipals(prev, touched, &memo, shard)
	} else {
		s.principals = maps.Clone(prev.principals)
	}
	// The touched principals: their old keys out, then rebuilt from d.
	for _, id := range d.PrincipalIDs {
		if old := prev.principals[id]; old != nil {
			for _, h := range old.keyHashes {
				delete(shard(h[0]), h)
			}
			delete(s.principals, id)
		}
	}
	changed := make(map[string]*Principal, len(d.Principals))
	prs := make([]Principal, len(d.Principals))
	for i := range d.Principals {
		prs[i] = newPrincipal(&d.Principals[i])
		changed[prs[i].ID] = &prs[i]
		s.principals[prs[i].ID] = &prs[i]
	}
	s.addRouters(d.Chains, changed)
	for _, p := range changed {
		s.resolveRoutes(p, &memo)
	}
	s.routes = memo.shared
	for _, k := range d.Keys {
		if len(k.Hash) == sha256.Size {
			shard(k.Hash[0])
		}
	}
	s.addKeys(d.Keys, changed)
	return s
}

// applyUpstreams builds the upstream lists of cfg: an upstream d did not
// touch is copied from prev (its credential already opened, its URLs
// parsed), a touched one is opened as Build does.
func (s *Snapshot) applyUpstreams(prev *Snapshot, cfg *store.Config, d *store.ConfigDelta, open Opener) {
	fresh := make(map[string]bool, len(d.Upstreams))
	for i := range d.Upstreams {
		fresh[d.Upstreams[i].ID] = true
	}
	var rows []store.Upstream
	for i := range cfg.Upstreams {
		if id := cfg.Upstreams[i].ID; d.AllUpstreams || fresh[id] || (prev.upstreamID[id] == nil && prev.Errors[id] == "") {
			rows = append(rows, cfg.Upstreams[i])
		}
	}
	opened := &Snapshot{}
	opened.buildUpstreams(&store.Config{Upstreams: rows}, open)
	s.Upstreams, s.Usable = nil, nil
	s.upstreamID = make(map[string]*Upstream, len(cfg.Upstreams))
	s.Errors = map[string]string{}
	copies := make([]Upstream, 0, len(cfg.Upstreams))
	for i := range cfg.Upstreams {
		id := cfg.Upstreams[i].ID
		var u *Upstream
		if v, ok := opened.upstreamID[id]; ok {
			u = v
		} else if v := prev.upstreamID[id]; v != nil && !fresh[id] && !d.AllUpstreams {
			copies = append(copies, *v)
			u = &copies[len(copies)-1]
		}
		if msg, ok := opened.Errors[id]; ok {
			s.Errors[id] = msg
		} else if msg, ok := prev.Errors[id]; ok && !fresh[id] && !d.AllUpstreams {
			s.Errors[id] = msg
		}
		if u == nil {
			continue // not usable in any snapshot (an invalid base_url)
		}
		s.Upstreams = append(s.Upstreams, u)
		s.upstreamID[id] = u
	}
	for _, u := range s.Upstreams {
		u.UsableIndex = -1
		if u.Enabled && u.Credential != "" {
			u.UsableIndex = len(s.Usable)
			s.Usable = append(s.Usable, u)
		}
	}
}

// rebasePrincipals copies every principal of prev that d did not touch
// onto this snapshot's upstreams: candidates resolved again, WASM routers
// given a fresh binding slot (a binding is bound to the usable list), and
// every key re-pointed at the copy. Keys of touched principals still
// point at prev's principals; Apply removes them next.
func (s *Snapshot) rebasePrincipals(prev *Snapshot, touched map[string]bool, memo *routesMemo, shard func(byte) map[[sha256.Size]byte]*Key) {
	s.principals = make(map[string]*Principal, len(prev.principals))
	copies := make([]Principal, 0, len(prev.principals))
	moved := make(map[*Principal]*Principal, len(prev.principals))
	for id, p := range prev.principals {
		if touched[id] {
			continue
		}
		copies = append(copies, *p)
		c := &copies[len(copies)-1]
		c.Candidates, c.Dynamic, c.Lead = nil, false, nil
		c.Routers = rebind(p.Routers)
		s.resolveRoutes(c, memo)
		s.principals[id] = c
		moved[p] = c
	}
	n := 0
	for _, m := range prev.keys {
		n += len(m)
	}
	ks := make([]Key, 0, n)
	for b := range s.keys {
		m := shard(byte(b))
		for h, k := range m {
			if c := moved[k.Principal]; c != nil {
				ks = append(ks, Key{ID: k.ID, Principal: c})
				m[h] = &ks[len(ks)-1] // an existing entry: allowed while ranging
			}
		}
	}
}

// rebind returns routers with a fresh binding slot for each WASM entry,
// sharing the slice when there is none.
func rebind(rs []Router) []Router {
	wasm := false
	for i := range rs {
		wasm = wasm || rs[i].Bound != nil
	}
	if !wasm {
		return rs
	}
	out := slices.Clone(rs)
	for i := range out {
		if out[i].Bound != nil {
			out[i].Bound = &Bound{}
		}
	}
	return out
}

// sameRouterPlugins reports whether every registry entry routers may name
// has the same id, name and digest in both (reference counts may differ).
func sameRouterPlugins(old map[string]store.RegistryEntry, entries []store.RegistryEntry) bool {
	if len(old) != len(entries) {
		return false
	}
	for _, e := range entries {
		o, ok := old[e.ID]
		if !ok || o.Name != e.Name || o.Digest != e.Digest {
			return false
		}
	}
	return true
}

// keysAfter lists the live keys of prev's configuration with d applied,
// for a build from a configuration whose holder left its keys out
// (store.Config.ApplyWithoutKeys): prev's keys but those of the
// principals d touched, then d's.
func keysAfter(prev *Snapshot, d *store.ConfigDelta) []store.Key {
	touched := make(map[string]bool, len(d.PrincipalIDs))
	for _, id := range d.PrincipalIDs {
		touched[id] = true
	}
	n := 0
	for _, m := range prev.keys {
		n += len(m)
	}
	out := make([]store.Key, 0, n+len(d.Keys))
	hashes := make([][sha256.Size]byte, 0, n)
	for _, m := range prev.keys {
		for h, k := range m {
			if !touched[k.Principal.ID] {
				hashes = append(hashes, h)
				out = append(out, store.Key{ID: k.ID, PrincipalID: k.Principal.ID, Hash: hashes[len(hashes)-1][:]})
			}
		}
	}
	return append(out, d.Keys...)
}
