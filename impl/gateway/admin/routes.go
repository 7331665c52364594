package admin

import (
	"encoding/json"
	"net/http"
	"reflect"
	"sort"
	"strings"
)

// route is one endpoint. The same table registers the handlers and
// generates the OpenAPI document, so the two cannot drift apart.
type route struct {
	method, pattern string
	h               func(http.ResponseWriter, *http.Request) error
	summary         string
	body            any // request body type, nil for none
	resp            any // response body type, nil for none
	status          int
	errors          []string
	ifMatch         string // "", "optional" or "required"
}

func (a *api) routes() []route {
	return []route{
		{method: "POST", pattern: "/admin/v1/upstreams", h: a.createUpstream, summary: "Create an upstream", body: UpstreamCreateBody{}, resp: UpstreamResponse{}, status: 201,
			errors: []string{"conflict", "invalid_location", "conflicting_api_key", "warmup_requires_oauth_credentials", "invalid_request"}},
		{method: "GET", pattern: "/admin/v1/upstreams", h: a.listUpstreams, summary: "List upstreams", resp: []UpstreamResponse{}, status: 200},
		{method: "GET", pattern: "/admin/v1/upstreams/{id}", h: a.getUpstream, summary: "Get an upstream (ETag carries spec_revision)", resp: UpstreamResponse{}, status: 200, errors: []string{"upstream_not_found"}},
		{method: "HEAD", pattern: "/admin/v1/upstreams/{id}", h: a.getUpstream, summary: "ETag of an upstream", status: 200, errors: []string{"upstream_not_found"}},
		{method: "PUT", pattern: "/admin/v1/upstreams/{id}", h: a.putUpstream, summary: "Replace an upstream's user-managed fields", body: UpstreamUpdateBody{}, resp: UpstreamResponse{}, status: 200, ifMatch: "optional",
			errors: []string{"stale_revision", "upstream_not_found", "conflict", "invalid_location", "conflicting_api_key", "warmup_requires_oauth_credentials", "invalid_request"}},
		{method: "PATCH", pattern: "/admin/v1/upstreams/{id}", h: a.patchUpstream, summary: "Change warmup_enabled (and other fields)", body: UpstreamPatchBody{}, resp: UpstreamResponse{}, status: 200, ifMatch: "required",
			errors: []string{"precondition_required", "stale_revision", "warmup_requires_oauth_credentials", "upstream_not_found", "invalid_request"}},
		{method: "DELETE", pattern: "/admin/v1/upstreams/{id}", h: a.deleteUpstream, summary: "Delete an upstream", status: 204, ifMatch: "optional", errors: []string{"referenced_by", "stale_revision", "upstream_not_found"}},
		{method: "POST", pattern: "/admin/v1/upstreams/{id}/enable", h: a.setUpstreamEnabled(true), summary: "Enable an upstream", resp: UpstreamResponse{}, status: 200, ifMatch: "optional", errors: []string{"stale_revision", "upstream_not_found"}},
		{method: "POST", pattern: "/admin/v1/upstreams/{id}/disable", h: a.setUpstreamEnabled(false), summary: "Disable an upstream", resp: UpstreamResponse{}, status: 200, ifMatch: "optional", errors: []string{"stale_revision", "upstream_not_found"}},
		{method: "GET", pattern: "/admin/v1/upstreams/{id}/limit-resets", h: a.limitResets, summary: "Stored limit-reset observation (no provider contact)", resp: map[string]any{}, status: 200, errors: []string{"upstream_not_found"}},

		{method: "POST", pattern: "/admin/v1/principals", h: a.createPrincipal, summary: "Create a principal (with the built-in router chain entry)", body: CreatePrincipalBody{}, resp: PrincipalResponse{}, status: 201,
			errors: []string{"conflict", "unsupported_cache_keepalive_llm_judge", "invalid_request"}},
		{method: "GET", pattern: "/admin/v1/principals", h: a.listPrincipals, summary: "List principals", resp: []PrincipalResponse{}, status: 200},
		{method: "GET", pattern: "/admin/v1/principals/{id}", h: a.getPrincipal, summary: "Get a principal (ETag carries revision)", resp: PrincipalResponse{}, status: 200, errors: []string{"unknown_principal"}},
		{method: "HEAD", pattern: "/admin/v1/principals/{id}", h: a.getPrincipal, summary: "ETag of a principal", status: 200, errors: []string{"unknown_principal"}},
		{method: "PUT", pattern: "/admin/v1/principals/{id}", h: a.putPrincipal, summary: "Replace a principal", body: CreatePrincipalBody{}, resp: PrincipalResponse{}, status: 200, ifMatch: "optional",
			errors: []string{"stale_revision", "unknown_principal", "conflict", "unsupported_cache_keepalive_llm_judge", "invalid_request"}},
		{method: "PATCH", pattern: "/admin/v1/principals/{id}", h: a.patchPrincipal, summary: "Change fields; cache_keepalive null clears it", body: PatchPrincipalBody{}, resp: PrincipalResponse{}, status: 200, ifMatch: "optional",
			errors: []string{"stale_revision", "unknown_principal", "unsupported_cache_keepalive_llm_judge", "invalid_request"}},
		{method: "DELETE", pattern: "/admin/v1/principals/{id}", h: a.deletePrincipal, summary: "Delete a principal with its keys and chain", status: 204, ifMatch: "optional", errors: []string{"stale_revision", "unknown_principal"}},
		{method: "POST", pattern: "/admin/v1/principals/{id}/enable", h: a.setPrincipalEnabled(true), summary: "Enable a principal", resp: PrincipalResponse{}, status: 200, ifMatch: "optional", errors: []string{"stale_revision", "unknown_principal"}},
		{method: "POST", pattern: "/admin/v1/principals/{id}/disable", h: a.setPrincipalEnabled(false), summary: "Disable a principal", resp: PrincipalResponse{}, status: 200, ifMatch: "optional", errors: []string{"stale_revision", "unknown_principal"}},
		{method: "PUT", pattern: "/admin/v1/principals/{id}/allowed_models", h: a.putAllowedModels, summary: "Replace allowed models", body: AllowedModelsBody{}, resp: PrincipalResponse{}, status: 200, ifMatch: "optional",
			errors: []string{"stale_revision", "unknown_principal", "invalid_request"}},
		{method: "POST", pattern: "/admin/v1/principals/{id}/keys", h: a.issueKey, summary: "Issue a key; the plaintext is returned once", body: IssueKeyBody{}, resp: KeyResponse{}, status: 201, errors: []string{"unknown_principal"}},
		{method: "GET", pattern: "/admin/v1/principals/{id}/keys", h: a.listKeys, summary: "List a principal's keys (no plaintext)", resp: []KeyResponse{}, status: 200, errors: []string{"unknown_principal"}},
		{method: "DELETE", pattern: "/admin/v1/principals/{id}/keys/{key_id}", h: a.revokeKey, summary: "Revoke a key", resp: KeyResponse{}, status: 200, errors: []string{"unknown_principal", "key_not_found"}},
		{method: "GET", pattern: "/admin/v1/principals/{principal_id}/plugin-chain", h: a.listChain, summary: "List a principal's plugin chain", resp: ChainListResponse{}, status: 200, errors: []string{"unknown_principal"}},

		{method: "GET", pattern: "/admin/v1/status", h: a.status, summary: "Replica and storage status", resp: StatusResponse{}, status: 200, errors: []string{"storage_unavailable"}},
		{method: "GET", pattern: "/admin/v1/upstreams/{id}/models", h: a.upstreamModels, summary: "Models the upstream offers, as last refreshed by the metadata job", resp: []UpstreamModel{}, status: 200, errors: []string{"upstream_not_found"}},
		{method: "GET", pattern: "/admin/v1/price-catalog", h: a.priceCatalog, summary: "The price catalog installed on this replica", resp: PriceCatalogResponse{}, status: 200},
		{method: "GET", pattern: "/admin/v1/request-events", h: a.requestEvents, summary: "Recent proxied requests with token usage, newest first (?limit, ?since_unix_secs)", resp: []RequestEventResponse{}, status: 200, errors: []string{"invalid_request", "storage_unavailable"}},
		{method: "GET", pattern: "/admin/v1/export", h: a.export, summary: "Whole configuration without secrets", resp: ExportResponse{}, status: 200, errors: []string{"storage_unavailable"}},
	}
}

// codeStatus is the HTTP status of every error code.
var codeStatus = map[string]int{
	"invalid_request": 400, "invalid_location": 400, "conflicting_api_key": 400, "warmup_requires_oauth_credentials": 400,
	"unsupported_cache_keepalive_llm_judge": 400, "unauthorized": 401, "not_found": 404, "upstream_not_found": 404,
	"unknown_principal": 404, "key_not_found": 404, "unknown_registry_entry": 404, "method_not_allowed": 405,
	"conflict": 409, "stale_revision": 409, "referenced_by": 409, "references_changed": 409, "request_too_large": 413,
	"unsupported_media_type": 415, "precondition_required": 428, "internal": 500, "storage_unavailable": 503,
}

// openAPIDocument renders the OpenAPI 3.1 description of the routes.
func openAPIDocument(routes []route) []byte {
	schemas := map[string]any{
		"Error": map[string]any{"type": "object", "required": []string{"error"}, "properties": map[string]any{
			"error": map[string]any{"type": "object", "required": []string{"code", "message"}, "properties": map[string]any{
				"code": map[string]any{"type": "string"}, "message": map[string]any{"type": "string"}, "details": map[string]any{}}}}},
	}
	paths := map[string]map[string]any{}
	for _, r := range routes {
		op := map[string]any{"summary": r.summary, "operationId": strings.ToLower(r.method) + opName(r.pattern)}
		var params []any
		for _, seg := range strings.Split(r.pattern, "/") {
			if strings.HasPrefix(seg, "{") {
				params = append(params, map[string]any{"name": strings.Trim(seg, "{}"), "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
			}
		}
		if r.ifMatch != "" {
			params = append(params, map[string]any{"name": "If-Match", "in": "header", "required": r.ifMatch == "required",
				"description": "Expected revision, e.g. \"3\"; a stale value fails with 409 stale_revision", "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if r.body != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(r.body), schemas)}}}
		}
		responses := map[string]any{}
		ok := map[string]any{"description": "success"}
		if r.resp != nil {
			ok["content"] = map[string]any{"application/json": map[string]any{"schema": schemaOf(reflect.TypeOf(r.resp), schemas)}}
		}
		responses[itoa(r.status)] = ok
		codes := append([]string{"unauthorized"}, r.errors...)
		byStatus := map[int][]string{}
		for _, c := range codes {
			byStatus[codeStatus[c]] = append(byStatus[codeStatus[c]], c)
		}
		for st, cs := range byStatus {
			responses[itoa(st)] = map[string]any{"description": "error codes: " + strings.Join(cs, ", "),
				"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}}}
		}
		op["responses"] = responses
		if paths[r.pattern] == nil {
			paths[r.pattern] = map[string]any{}
		}
		paths[r.pattern][strings.ToLower(r.method)] = op
	}
	doc := map[string]any{
		"openapi": "3.1.0",
		"info":    map[string]any{"title": "Proxy admin API", "version": "v1", "description": "See docs/admin-api.md. Every operation requires Authorization: Bearer <admin token>."},
		"components": map[string]any{
			"schemas":         schemas,
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
		},
		"security": []any{map[string]any{"bearer": []string{}}},
		"paths":    paths,
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	return b
}

func opName(p string) string {
	var b strings.Builder
	for _, seg := range strings.Split(p, "/") {
		seg = strings.Trim(seg, "{}")
		if seg == "" || seg == "admin" || seg == "v1" {
			continue
		}
		for _, part := range strings.FieldsFunc(seg, func(r rune) bool { return r == '-' || r == '_' }) {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

var rawMessage = reflect.TypeOf(json.RawMessage{})

// schemaOf derives a JSON schema from a Go type's json tags, registering
// named structs as components.
func schemaOf(t reflect.Type, schemas map[string]any) map[string]any {
	if t == rawMessage {
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.Pointer:
		s := schemaOf(t.Elem(), schemas)
		if typ, ok := s["type"].(string); ok {
			s["type"] = []string{typ, "null"}
		}
		return s
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32:
		return map[string]any{"type": "integer"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), schemas)}
	case reflect.Map:
		return map[string]any{"type": "object"}
	case reflect.Struct:
		name := t.Name()
		if _, done := schemas[name]; !done {
			schemas[name] = map[string]any{} // placeholder against recursion
			props := map[string]any{}
			var names []string
			addFields(t, props, &names, schemas)
			sort.Strings(names)
			schemas[name] = map[string]any{"type": "object", "properties": props}
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}
	}
	return map[string]any{}
}

func addFields(t reflect.Type, props map[string]any, names *[]string, schemas map[string]any) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			addFields(f.Type, props, names, schemas)
			continue
		}
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if tag == "" || tag == "-" {
			continue
		}
		props[tag] = schemaOf(f.Type, schemas)
		*names = append(*names, tag)
	}
}
