package provider

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Models lists the models the sim offers on GET /v1/models.
var Models = []struct{ ID, DisplayName string }{
	{"claude-sonnet-4-5", "Claude Sonnet 4.5"},
	{"claude-haiku-4-5", "Claude Haiku 4.5"},
	{"claude-opus-4-1", "Claude Opus 4.1"},
}

func (p *Provider) models(w http.ResponseWriter, r *http.Request) {
	if _, ok := p.authenticate(w, r); !ok {
		return
	}
	var data []map[string]any
	for _, m := range Models {
		data = append(data, map[string]any{"type": "model", "id": m.ID, "display_name": m.DisplayName, "created_at": "2025-09-29T00:00:00Z"})
	}
	writeJSON(w, map[string]any{"data": data, "has_more": false, "first_id": Models[0].ID, "last_id": Models[len(Models)-1].ID})
}

// CatalogPath serves a price catalog, standing in for the external price
// list the gateway fetches. Its version changes with SetCatalogVersion, and
// it answers If-None-Match with 304 when unchanged.
const CatalogPath = "/catalog/prices.json"

// SetCatalogVersion changes the served price catalog's version.
func (p *Provider) SetCatalogVersion(v int) {
	p.mu.Lock()
	p.catalogVersion = v
	p.mu.Unlock()
}

func (p *Provider) catalog(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	v := p.catalogVersion
	p.mu.Unlock()
	if v == 0 {
		v = 1
	}
	etag := fmt.Sprintf(`"v%d"`, v)
	w.Header().Set("ETag", etag)
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	// Prices in USD per million tokens; version v scales them so a test can
	// tell versions apart.
	prices := map[string]any{}
	for i, m := range Models {
		base := float64(3*(i+1)) * float64(v)
		prices[m.ID] = map[string]float64{"input": base, "output": base * 5, "cache_write": base * 1.25, "cache_read": base * 0.1}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"version": fmt.Sprintf("v%d", v), "currency": "USD", "unit": "per_million_tokens", "models": prices})
}
