package snapshot

import (
	"crypto/sha256"
	"maps"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Apply builds the snapshot of cfg, which is prev's configuration with d
// applied (store.Config.Apply), from prev: what d did not touch is shared
// with prev, never modified, so readers holding prev are unaffected. A
// delta that changes upstreams or what routers know of plugins moves every
// principal's candidates, and is built in full from cfg (without reading
// the database again); one that changes principals, keys or chains
// re-derives only those principals and their keys.
func Apply(prev *Snapshot, cfg *store.Config, d *store.ConfigDelta, open Opener, now time.Time) *Snapshot {
	if d.UpstreamsChanged() || !sameRouterPlugins(prev.Plugins, cfg.Plugins) {
		return Build(cfg, open, now)
	}
	s := &Snapshot{
		Generation: cfg.Generation, BuiltAt: now,
		// Upstreams did not change: shared, with the lists derived from them.
		Upstreams: prev.Upstreams, upstreamID: prev.upstreamID, Errors: prev.Errors, Usable: prev.Usable, routes: prev.routes,
		keys:       new([keyShards]map[[sha256.Size]byte]*Key),
		principals: maps.Clone(prev.principals),
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
	// The routes memo is shared with prev; a pin set it lacks gets a copy.
	memo := routesMemo{shared: s.routes}
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
