package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// PluginRouter runs a router plugin.
type PluginRouter interface {
	Route(ctx context.Context, digest string, in *plugins.RouteInput) (*plugins.RouteOutput, error)
}

var errNoPlugins = errors.New("no plugin runtime")

// route runs a dynamic chain: its routers form a pipeline, each ordering or
// narrowing the candidates the previous one left, starting from every
// usable upstream. A failing plugin fails the request (closed), a refusal
// refuses it.
func (h *Handler) route(r *http.Request, snap *snapshot.Snapshot, p *snapshot.Principal, model string, stream bool) ([]*snapshot.Upstream, *plugins.Refusal, error) {
	cur := snap.Usable
	for _, rt := range p.Routers {
		switch {
		case rt.Builtin == store.BuiltinSubscriptionPreference:
			cur = snapshot.RouteBuiltin(cur, rt.Pinned)
			continue
		case rt.Builtin != "":
			continue // a built-in this build does not know: no effect
		case rt.WasmDigest == "":
			return nil, nil, fmt.Errorf("chain entry %s names a plugin that is not in the registry", rt.EntryID)
		case h.plugins == nil:
			return nil, nil, errNoPlugins
		}
		in := &plugins.RouteInput{Principal: plugins.PrincipalIn{ID: p.ID, Name: p.Name}, Model: model, Stream: stream,
			Headers: map[string]string{}, Config: rt.Config, Candidates: make([]plugins.Candidate, 0, len(cur))}
		for _, name := range []string{"Anthropic-Beta", "Anthropic-Version", "User-Agent"} {
			if v := r.Header.Get(name); v != "" {
				in.Headers[name] = v
			}
		}
		byID := make(map[string]*snapshot.Upstream, len(cur))
		for _, u := range cur {
			in.Candidates = append(in.Candidates, plugins.Candidate{ID: u.ID, Name: u.Name, Kind: u.Kind, Healthy: u.Enabled && u.Credential != ""})
			byID[u.ID] = u
		}
		out, err := h.plugins.Route(r.Context(), rt.WasmDigest, in)
		if err != nil {
			return nil, nil, fmt.Errorf("plugin %s: %w", rt.WasmName, err)
		}
		if out.Refuse != nil {
			return nil, out.Refuse, nil
		}
		next := make([]*snapshot.Upstream, 0, len(out.Upstreams))
		for _, id := range out.Upstreams {
			next = append(next, byID[id])
		}
		cur = next
	}
	return cur, nil, nil
}
