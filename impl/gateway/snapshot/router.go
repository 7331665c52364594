package snapshot

import (
	"maps"
	"slices"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Routing is decided at build time for built-in routers: their choice depends
// only on configuration, so the request path reads a precomputed list.

// routeBuiltin orders usable upstreams for the built-in subscription-preference
// router: enabled subscription (OAuth) upstreams holding a credential first,
// then enabled API-key and cloud (bedrock, vertex) upstreams, each group in
// creation order. pinned, when
// non-empty, restricts the choice to those ids.
func routeBuiltin(ups []*Upstream, pinned []string) []*Upstream { return RouteBuiltin(ups, pinned) }

// RouteBuiltin is the built-in subscription-preference router; dynamic
// chains run it per request on the candidates they are given.
func RouteBuiltin(ups []*Upstream, pinned []string) []*Upstream {
	allowed := func(id string) bool {
		if len(pinned) == 0 {
			return true
		}
		for _, p := range pinned {
			if p == id {
				return true
			}
		}
		return false
	}
	var oauth, apikey []*Upstream
	for _, u := range ups {
		if !u.Enabled || u.Credential == "" || !allowed(u.ID) {
			continue
		}
		switch u.Kind {
		case store.KindVendorOAuth:
			oauth = append(oauth, u)
		case store.KindVendorAPIKey, store.KindBedrock, store.KindVertex:
			// Cloud upstreams are paid per token like an API key: one
			// priority class with them (docs/cloud.md).
			apikey = append(apikey, u)
		}
	}
	return append(oauth, apikey...)
}

// routesMemo holds candidate lists by pin set. A snapshot applied from
// another starts with the other's map and copies it before its first
// addition (owned), so the other snapshot's map is never written.
type routesMemo struct {
	shared map[string][]*Upstream
	owned  bool
	// indexes holds the Usable positions of lists by the list's first
	// element and length (lists are shared, so one per list); this build's
	// only, never carried to another snapshot.
	indexes map[listID][]uint16
}

type listID struct {
	first **Upstream
	n     int
}

func (m *routesMemo) set(k string, c []*Upstream) {
	if !m.owned {
		m.shared = maps.Clone(m.shared)
		if m.shared == nil {
			m.shared = map[string][]*Upstream{}
		}
		m.owned = true
	}
	m.shared[k] = c
}

// resolveRoutes computes a principal's candidate list from its router entries:
// the first entry yielding a non-empty list decides. A chain with no router
// entry falls back to the built-in preference, so removing the built-in entry
// never leaves a principal unroutable by accident. Lists depend only on the
// pinned ids, so principals with the same pins share one (read-only) list:
// without that, 10,000 principals over 1,000 upstreams built 10,000 lists of
// 1,000, which was most of a build's time and memory (docs/benchmarks.md,
// "Why the scale targets stand where they do").
func (s *Snapshot) resolveRoutes(p *Principal, memo *routesMemo) {
	route := func(pinned []string) []*Upstream { return s.memoRoute(pinned, memo) }
	if len(p.Routers) == 0 {
		p.Candidates = route(nil)
		return
	}
	for _, r := range p.Routers {
		if r.Builtin == "" {
			// A WASM router decides per request: the request path runs the
			// whole chain as a pipeline (relay.route), from its lead.
			p.Dynamic = true
			p.Lead = s.lead(p.Routers, memo)
			return
		}
	}
	for _, r := range p.Routers {
		if c := route(r.Pinned); len(c) > 0 {
			p.Candidates = c
			return
		}
	}
}

// memoRoute is the built-in router's list for pinned, from the memo.
func (s *Snapshot) memoRoute(pinned []string, memo *routesMemo) []*Upstream {
	k := strings.Join(pinned, "\x00")
	c, ok := memo.shared[k]
	if !ok {
		c = slices.Clip(routeBuiltin(s.Upstreams, pinned))
		memo.set(k, c)
	}
	return c
}

// lead runs a dynamic chain's leading built-in routers (those before its
// first WASM entry) on the usable upstreams, as relay.route would on every
// request, and indexes the result. A lone leading subscription-preference
// entry shares the memo's list, as static chains do.
func (s *Snapshot) lead(rs []Router, memo *routesMemo) *Lead {
	l := &Lead{Candidates: s.Usable}
	for l.Next < len(rs) && rs[l.Next].Builtin != "" {
		if r := &rs[l.Next]; r.Builtin == store.BuiltinSubscriptionPreference {
			if l.Next == 0 {
				l.Candidates = s.memoRoute(r.Pinned, memo)
			} else {
				l.Candidates = slices.Clip(RouteBuiltin(l.Candidates, r.Pinned))
			}
		}
		l.Next++
	}
	l.Indexes = memo.indexesOf(l.Candidates, len(s.Usable))
	return l
}

// maxIndexes bounds the usable list whose positions fit 16-bit indexes.
const maxIndexes = 1<<16 - 1

// indexesOf returns the Usable positions of list c (shared by every
// principal with the same list in this build).
func (m *routesMemo) indexesOf(c []*Upstream, usable int) []uint16 {
	if usable > maxIndexes {
		return nil
	}
	if len(c) == 0 {
		return []uint16{}
	}
	id := listID{&c[0], len(c)}
	if ix, ok := m.indexes[id]; ok {
		return ix
	}
	ix := make([]uint16, len(c))
	for i, u := range c {
		ix[i] = uint16(u.UsableIndex)
	}
	if m.indexes == nil {
		m.indexes = map[listID][]uint16{}
	}
	m.indexes[id] = ix
	return ix
}
