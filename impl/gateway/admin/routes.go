package admin

import (
	_ "embed"
	"net/http"
)

// route is one endpoint of the admin API. Every route here is described in
// openapi.json and vice versa (openapi_test.go checks both directions).
type route struct {
	method, pattern string
	h               func(http.ResponseWriter, *http.Request) error
}

func (a *api) routes() []route {
	return []route{
		{"POST", "/admin/v1/upstreams", a.createUpstream},
		{"GET", "/admin/v1/upstreams", a.listUpstreams},
		{"GET", "/admin/v1/upstreams/{id}", a.getUpstream},
		{"HEAD", "/admin/v1/upstreams/{id}", a.getUpstream},
		{"PUT", "/admin/v1/upstreams/{id}", a.putUpstream},
		{"PATCH", "/admin/v1/upstreams/{id}", a.patchUpstream},
		{"DELETE", "/admin/v1/upstreams/{id}", a.deleteUpstream},
		{"POST", "/admin/v1/upstreams/{id}/enable", a.setUpstreamEnabled(true)},
		{"POST", "/admin/v1/upstreams/{id}/disable", a.setUpstreamEnabled(false)},
		{"GET", "/admin/v1/upstreams/{id}/limit-resets", a.limitResets},
		{"GET", "/admin/v1/upstreams/{id}/models", a.upstreamModels},
		{"POST", "/admin/v1/upstreams/{id}/oauth/start", a.oauthStart},
		{"POST", "/admin/v1/upstreams/{id}/oauth/complete", a.oauthComplete},
		{"POST", "/admin/v1/upstreams/{id}/oauth/revoke", a.oauthRevoke},
		{"POST", "/admin/v1/upstreams/{id}/limit-resets/claim", a.claimLimitReset},

		{"POST", "/admin/v1/principals", a.createPrincipal},
		{"GET", "/admin/v1/principals", a.listPrincipals},
		{"GET", "/admin/v1/principals/{id}", a.getPrincipal},
		{"HEAD", "/admin/v1/principals/{id}", a.getPrincipal},
		{"PUT", "/admin/v1/principals/{id}", a.putPrincipal},
		{"PATCH", "/admin/v1/principals/{id}", a.patchPrincipal},
		{"DELETE", "/admin/v1/principals/{id}", a.deletePrincipal},
		{"POST", "/admin/v1/principals/{id}/enable", a.setPrincipalEnabled(true)},
		{"POST", "/admin/v1/principals/{id}/disable", a.setPrincipalEnabled(false)},
		{"PUT", "/admin/v1/principals/{id}/allowed_models", a.putAllowedModels},
		{"POST", "/admin/v1/principals/{id}/keys", a.issueKey},
		{"GET", "/admin/v1/principals/{id}/keys", a.listKeys},
		{"DELETE", "/admin/v1/principals/{id}/keys/{key_id}", a.revokeKey},
		{"GET", "/admin/v1/principals/{principal_id}/plugin-chain", a.listChain},
		{"POST", "/admin/v1/principals/{principal_id}/plugin-chain", a.insertChain},
		{"POST", "/admin/v1/principals/{principal_id}/plugin-chain/reorder", a.reorderChain},
		{"POST", "/admin/v1/principals/{principal_id}/plugin-chain/rebalance", a.rebalanceChain},
		{"PUT", "/admin/v1/plugin-chain-entries/{id}", a.updateChainEntry},
		{"DELETE", "/admin/v1/plugin-chain-entries/{id}", a.deleteChainEntry},
		{"POST", "/admin/v1/plugins/wasm", a.uploadPlugin},
		{"GET", "/admin/v1/plugins/registry", a.listRegistry},
		{"GET", "/admin/v1/plugins/registry/{id}", a.getRegistry},
		{"GET", "/admin/v1/plugins/registry/{id}/references", a.registryReferences},
		{"PATCH", "/admin/v1/plugins/registry/{id}", a.patchRegistry},
		{"DELETE", "/admin/v1/plugins/registry/{id}", a.deleteRegistry},

		{"POST", "/admin/v1/webhooks", a.createWebhook},
		{"GET", "/admin/v1/webhooks", a.listWebhooks},
		{"GET", "/admin/v1/webhooks/{id}", a.getWebhook},
		{"PUT", "/admin/v1/webhooks/{id}", a.putWebhook},
		{"DELETE", "/admin/v1/webhooks/{id}", a.deleteWebhook},
		{"POST", "/admin/v1/webhooks/{id}/test", a.testWebhook},
		{"GET", "/admin/v1/webhooks/{id}/deliveries", a.webhookDeliveries},
		{"GET", "/admin/v1/alerts", a.listAlerts},

		{"GET", "/admin/v1/status", a.status},
		{"GET", "/admin/v1/export", a.export},
		{"GET", "/admin/v1/request-events", a.requestEvents},
		{"GET", "/admin/v1/request-events/{id}/exchange", a.capturedExchange},
		{"GET", "/admin/v1/usage-rollups", a.usageRollups},
		{"GET", "/admin/v1/request-log", a.requestLog}, // dashboard: operator's views (overview.go, requestlog.go)
		{"GET", "/admin/v1/traffic", a.traffic},
		{"GET", "/admin/v1/overview", a.overview},
		{"GET", "/admin/v1/usage", a.usageReport}, // spend (spend.go)
		{"GET", "/admin/v1/price-catalog", a.priceCatalog},
		{"GET", "/admin/v1/openapi.json", a.openAPI},
	}
}

// openAPIDocument is the OpenAPI 3.1 description of every route, schema and
// error code, served as it is.
//
//go:embed openapi.json
var openAPIDocument []byte

func (a *api) openAPI(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPIDocument)
	return nil
}
