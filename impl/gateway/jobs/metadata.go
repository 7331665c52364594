package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Job type names of the metadata jobs.
const (
	MetadataRefresh   = "metadata_refresh"
	PriceCatalogFetch = "price_catalog_fetch"
)

// refreshModels asks every routable upstream (enabled, holding a credential
// its provider has not revoked) for its models (GET /v1/models) and stores
// the lists. A failing upstream fails the attempt, so the Probe class
// retries it; the others are stored anyway.
func refreshModels(ctx context.Context, d Deps) (scheduler.Outcome, error) {
	var ups []*snapshot.Upstream
	if d.Upstreams != nil {
		ups = d.Upstreams()
	}
	var errs []error
	refreshed := 0
	for _, u := range ups {
		if u.RefreshRefused {
			// The provider revoked the token: asking with it again would
			// only be refused (the upstream is out of routing too).
			d.metadataStatus("refresh_refused")
			continue
		}
		if !u.Routable() || store.IsCloud(u.Kind) {
			// A cloud upstream has no model listing of its own: what it
			// serves is its model map (docs/cloud.md).
			d.metadataStatus("skipped")
			continue
		}
		models, err := fetchModels(ctx, d.HTTP, u)
		if err == nil {
			now := d.Clock.Now()
			var ms []store.UpstreamModel
			for _, m := range models {
				ms = append(ms, store.UpstreamModel{ModelID: m.ID, DisplayName: m.DisplayName, RefreshedAt: now})
			}
			err = d.Store.SetUpstreamModels(ctx, u.ID, ms)
		}
		if err != nil {
			d.metadataStatus("error")
			errs = append(errs, fmt.Errorf("upstream %s: %w", u.ID, err))
			continue
		}
		d.metadataStatus("ok")
		refreshed++
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	if refreshed == 0 {
		return scheduler.OutcomeSkip, nil
	}
	return scheduler.OutcomeDone, nil
}

func (d Deps) metadataStatus(status string) {
	if d.Metrics != nil {
		d.Metrics.MetadataRefreshStatus.WithLabelValues(status).Inc()
	}
}

type apiModel struct {
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
}

func fetchModels(ctx context.Context, c *http.Client, u *snapshot.Upstream) ([]apiModel, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.BaseURL+"/v1/models?limit=1000", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("anthropic-version", "2023-06-01")
	credential.Set(req.Header, u.CredentialKind, u.Credential)
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 4096)) // drained for reuse
		return nil, fmt.Errorf("GET /v1/models: status %d", res.StatusCode)
	}
	var list struct {
		Data []apiModel `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(res.Body, 4<<20)).Decode(&list); err != nil {
		return nil, fmt.Errorf("GET /v1/models: %w", err)
	}
	return list.Data, nil
}

// fetchCatalog fetches the price catalog with a conditional GET and stores
// a new version. Every replica then installs it locally (see pricing).
func fetchCatalog(ctx context.Context, d Deps) (scheduler.Outcome, error) {
	if d.CatalogURL == "" {
		return scheduler.OutcomeSkip, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.CatalogURL, nil)
	if err != nil {
		return "", fmt.Errorf("%w: %v", scheduler.ErrPermanent, err)
	}
	if cur, err := d.Store.GetPriceCatalog(ctx); err == nil && cur.ETag != "" {
		req.Header.Set("If-None-Match", cur.ETag)
	}
	res, err := d.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotModified {
		d.catalogStatus("noop")
		return scheduler.OutcomeNoop, nil
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("price catalog: status %d", res.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	if err != nil {
		return "", err
	}
	var doc struct {
		Version string                     `json:"version"`
		Models  map[string]json.RawMessage `json:"models"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Version == "" || doc.Models == nil {
		return "", fmt.Errorf("%w: price catalog is not {version, models}", scheduler.ErrPermanent)
	}
	changed, err := d.Store.PutPriceCatalog(ctx, store.PriceCatalog{Version: doc.Version, ETag: res.Header.Get("ETag"), Body: body, FetchedAt: d.Clock.Now()})
	if err != nil {
		return "", err
	}
	if !changed {
		d.catalogStatus("noop")
		return scheduler.OutcomeNoop, nil
	}
	d.catalogStatus("applied")
	return scheduler.OutcomeDone, nil
}

func (d Deps) catalogStatus(status string) {
	if d.Metrics != nil {
		d.Metrics.PriceCatalogStatus.WithLabelValues(status).Inc()
	}
}
