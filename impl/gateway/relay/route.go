package relay

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"

	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// PluginRouter binds router plugins.
type PluginRouter interface {
	BindRouter(digest string, config json.RawMessage, table []plugins.Candidate) (*plugins.Binding, error)
}

var errNoPlugins = errors.New("no plugin runtime")

// scratchLen is how many candidate indexes route keeps on its stack; a
// longer list grows onto the heap.
const scratchLen = 32

// route runs a dynamic chain: its routers form a pipeline, each ordering or
// narrowing the candidates the previous one left, starting from every
// usable upstream. A failing plugin fails the request (closed), a refusal
// refuses it. The leading built-in entries were run when the snapshot was
// built (p.Lead); the request starts at the first WASM entry.
func (h *Handler) route(r *http.Request, snap *snapshot.Snapshot, p *snapshot.Principal, model string, stream bool) ([]*snapshot.Upstream, *plugins.Refusal, error) {
	lead := p.Lead
	if lead == nil {
		lead = &snapshot.Lead{Candidates: snap.Usable}
	}
	// idx are cur's positions in snap.Usable when known (nil: computed
	// when a plugin needs them). A plugin's choice is the next plugin's
	// offer, so a choice goes into the buffer the offer is not in. They
	// live on the stack: a router call keeps neither slice, and a pool's
	// get and put cost more than the call's own work.
	cur, idx := lead.Candidates, lead.Indexes
	var bufs [2][scratchLen]uint16
	spare := 0
	var req plugins.RouteRequest
	reqSet := false
	for i := lead.Next; i < len(p.Routers); i++ {
		rt := &p.Routers[i]
		switch {
		case rt.Builtin == store.BuiltinSubscriptionPreference:
			cur, idx = snapshot.RouteBuiltin(cur, rt.Pinned), nil
			continue
		case rt.Builtin != "":
			continue // a built-in this build does not know: no effect
		case rt.WasmDigest == "":
			return nil, nil, fmt.Errorf("chain entry %s names a plugin that is not in the registry", rt.EntryID)
		case h.plugins == nil:
			return nil, nil, errNoPlugins
		}
		b, release, err := h.binding(snap, rt)
		if err != nil {
			return nil, nil, fmt.Errorf("plugin %s: %w", rt.WasmName, err)
		}
		if idx == nil {
			idx, spare = bufs[0][:0], 1
			for _, u := range cur {
				idx = append(idx, uint16(u.UsableIndex))
			}
		}
		if !reqSet {
			req = plugins.RouteRequest{PrincipalID: p.ID, PrincipalName: p.Name, Model: model, Stream: stream,
				AnthropicBeta: header(r.Header, "Anthropic-Beta"), AnthropicVersion: header(r.Header, "Anthropic-Version"),
				UserAgent: header(r.Header, "User-Agent")}
			reqSet = true
		}
		chosen, refusal, err := b.Route(r.Context(), &req, idx, bufs[spare][:0])
		if release {
			b.Release()
		}
		if err != nil {
			return nil, nil, fmt.Errorf("plugin %s: %w", rt.WasmName, err)
		}
		if refusal != nil {
			return nil, refusal, nil
		}
		cur = chosenUpstreams(snap.Usable, cur, idx, chosen)
		// The choice is in bufs[spare] (or on the heap, had it outgrown it).
		spare = 1 - spare
		idx = chosen
	}
	return cur, nil, nil
}

// chosenUpstreams maps a router's choice (positions in usable) to the
// upstreams, without allocating when it can: a choice of the offer as it
// was is the offer, and a choice of consecutive positions in order is a
// window of usable.
func chosenUpstreams(usable, offered []*snapshot.Upstream, offeredIdx, chosen []uint16) []*snapshot.Upstream {
	if slices.Equal(chosen, offeredIdx) {
		return offered
	}
	run := len(chosen) > 0
	for j := 1; run && j < len(chosen); j++ {
		run = chosen[j] == chosen[j-1]+1
	}
	if run {
		lo, hi := int(chosen[0]), int(chosen[0])+len(chosen)
		return usable[lo:hi:hi]
	}
	next := make([]*snapshot.Upstream, len(chosen))
	for j, c := range chosen {
		next[j] = usable[c]
	}
	return next
}

// header is h.Get for a canonical key: the server canonicalised the
// request's keys already, so the lookup skips canonicalising it again.
func header(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// binding returns the entry's plugin binding for this snapshot, binding it
// on first use. It lives as long as the snapshot: its reference is given
// back when the snapshot is collected. release is true when the caller
// must give it back itself (an entry without a Bound slot).
func (h *Handler) binding(snap *snapshot.Snapshot, rt *snapshot.Router) (_ *plugins.Binding, release bool, _ error) {
	if rt.Bound != nil {
		if b, ok := rt.Bound.Load().(*plugins.Binding); ok {
			return b, false, nil
		}
	}
	table := make([]plugins.Candidate, len(snap.Usable))
	for i, u := range snap.Usable {
		table[i] = plugins.Candidate{ID: u.ID, Name: u.Name, Kind: u.Kind, Healthy: u.Routable()}
	}
	b, err := h.plugins.BindRouter(rt.WasmDigest, rt.Config, table)
	if err != nil {
		return nil, false, err
	}
	if rt.Bound == nil {
		return b, true, nil
	}
	v, won := rt.Bound.Set(b)
	if !won {
		b.Release()
		return v.(*plugins.Binding), false, nil
	}
	runtime.AddCleanup(rt.Bound, (*plugins.Binding).Release, b)
	return b, false, nil
}
