package relay

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
)

// principalOf authenticates the request's key against the snapshot and
// answers the refusal itself; ok is false when it did.
func (h *Handler) principalOf(w http.ResponseWriter, r *http.Request) (*snapshot.Key, bool) {
	return h.principalIn(h.src.Current(), w, r)
}

// models serves GET /v1/models[/{id}] from the principal's first upstream,
// keeping only the models the principal may use, so clients that list
// models before choosing one see exactly what they can call.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		h.reply(w, r, proxyerr.MethodNotAllowed(r.Method, http.MethodGet), nil)
		return
	}
	k, ok := h.principalOf(w, r)
	if !ok {
		return
	}
	p := k.Principal
	if id, one := strings.CutPrefix(r.URL.Path, "/v1/models/"); one && !p.AllowsModel(id) {
		dontWaitForBody(w)
		h.reply(w, r, proxyerr.NotFound("model "+strconv.Quote(id)+" not found"), nil)
		return
	}
	var up *snapshot.Upstream
	for _, c := range p.Candidates {
		if c.Routable() {
			up = c
			break
		}
	}
	if up == nil {
		dontWaitForBody(w)
		h.reply(w, r, errNoUpstream(), nil)
		return
	}
	target := up.BaseURL + r.URL.Path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	out, err := http.NewRequestWithContext(r.Context(), http.MethodGet, target, nil)
	if err != nil {
		dontWaitForBody(w)
		h.reply(w, r, unreachableError(err), nil)
		return
	}
	copyRequestHeaders(out.Header, r.Header)
	setCredential(out.Header, up)
	resp, err := h.roundTrip(up, out)
	if err != nil {
		dontWaitForBody(w)
		h.reply(w, r, unreachableError(err), nil)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		dontWaitForBody(w)
		h.reply(w, r, proxyerr.API(http.StatusBadGateway, "upstream response truncated"), nil)
		return
	}
	if resp.StatusCode == http.StatusOK && r.URL.Path == "/v1/models" {
		body = filterModels(body, p)
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	if v := resp.Header.Get("Request-Id"); v != "" {
		w.Header().Set("Request-Id", v)
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
	if h.metrics != nil {
		h.metrics.observe(resp.StatusCode, 0)
	}
}

// filterModels keeps the models of a list response the principal may use.
func filterModels(body []byte, p *snapshot.Principal) []byte {
	var list map[string]json.RawMessage
	if json.Unmarshal(body, &list) != nil {
		return body
	}
	var data []json.RawMessage
	if json.Unmarshal(list["data"], &data) != nil {
		return body
	}
	kept := make([]json.RawMessage, 0, len(data))
	for _, m := range data {
		var id struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m, &id) == nil && p.AllowsModel(id.ID) {
			kept = append(kept, m)
		}
	}
	list["data"], _ = json.Marshal(kept)
	if len(kept) > 0 {
		var first, last struct {
			ID string `json:"id"`
		}
		// kept holds entries already decoded as objects; an entry without
		// a string id leaves the field empty.
		_ = json.Unmarshal(kept[0], &first)
		_ = json.Unmarshal(kept[len(kept)-1], &last)
		list["first_id"], _ = json.Marshal(first.ID)
		list["last_id"], _ = json.Marshal(last.ID)
	} else {
		list["first_id"], list["last_id"] = json.RawMessage("null"), json.RawMessage("null")
	}
	out, err := json.Marshal(list)
	if err != nil {
		return body
	}
	return out
}
