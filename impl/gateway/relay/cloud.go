package relay

import (
	"net/http"

	"github.com/pillarhq/pillar/impl/gateway/cloud"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// roundTripper is how a request reaches up: the relay's transport, or for
// a bedrock or vertex upstream the cloud transport around it, which
// rewrites the Anthropic request for the platform and its answer back
// (docs/cloud.md). Everything else (failover, cooldowns, the SSE tap, cut
// streams) sees an Anthropic answer either way.
func (h *Handler) roundTripper(up *snapshot.Upstream) (http.RoundTripper, error) {
	h.retainClouds()
	if !store.IsCloud(up.Kind) {
		return h.transport, nil
	}
	return h.clouds.For(cloud.Upstream{ID: up.ID, Kind: up.Kind, BaseURL: up.BaseURL,
		CredentialKind: up.CredentialKind, Credential: up.Credential, Config: up.Cloud})
}

// roundTrip sends out to up.
func (h *Handler) roundTrip(up *snapshot.Upstream, out *http.Request) (*http.Response, error) {
	rt, err := h.roundTripper(up)
	if err != nil {
		return nil, err
	}
	return rt.RoundTrip(out)
}

// upstreamModel is the id up is asked for when its model map renames the
// client's model, for the request event; "" when it is sent as named.
func upstreamModel(up *snapshot.Upstream, model string) string {
	if id, ok := up.Cloud.ModelMap[model]; ok && id != model {
		return id
	}
	return ""
}

// retainClouds lets the cloud pool drop the upstreams a new snapshot no
// longer holds, once per snapshot, on the first request sent under it.
func (h *Handler) retainClouds() {
	snap := h.src.Current()
	last := h.cloudsAt.Load()
	if snap == nil || snap == last || !h.cloudsAt.CompareAndSwap(last, snap) {
		return
	}
	h.clouds.Retain(func(id string) bool {
		u := snap.Upstream(id)
		return u != nil && store.IsCloud(u.Kind)
	})
}
