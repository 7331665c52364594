package admin

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

func loadDoc(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	if doc["openapi"] != "3.1.0" {
		t.Fatalf("openapi %v", doc["openapi"])
	}
	return doc
}

func operations(doc map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for p, ops := range doc["paths"].(map[string]any) {
		for m, op := range ops.(map[string]any) {
			out[strings.ToUpper(m)+" "+p] = op.(map[string]any)
		}
	}
	return out
}

// The document parses and every reference in it resolves.
func TestOpenAPIDocumentResolves(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				var cur any = doc
				for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
					m, _ := cur.(map[string]any)
					cur = m[part]
				}
				if cur == nil {
					t.Errorf("%s: unresolved $ref %s", at, ref)
				}
			}
			for k, c := range x {
				walk(c, at+"/"+k)
			}
		case []any:
			for i, c := range x {
				walk(c, fmt.Sprintf("%s/%d", at, i))
			}
		}
	}
	walk(doc, "#")
	seen := map[string]bool{}
	for name, op := range operations(doc) {
		id, _ := op["operationId"].(string)
		if id == "" || seen[id] || op["summary"] == nil {
			t.Errorf("%s: operationId %q missing, repeated or without summary", name, id)
		}
		seen[id] = true
	}
}

// Every route registered in the mux is documented, and every documented
// operation is routed to its own handler.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	a := New(Deps{}).(*api)
	var registered, documented []string
	for _, r := range append(a.routes(), a.identityRoutes()...) {
		registered = append(registered, r.method+" "+r.pattern)
	}
	for name := range operations(doc) {
		documented = append(documented, name)
	}
	sort.Strings(registered)
	sort.Strings(documented)
	// P-VER-1: admin resources live under /admin/v1.
	for _, r := range registered {
		if !strings.Contains(r, " /admin/v1/") {
			t.Errorf("route %s is outside /admin/v1", r)
		}
	}
	if !slices.Equal(registered, documented) {
		t.Fatalf("routes and openapi.json differ:\nroutes   %v\ndocument %v", registered, documented)
	}
	// The mux itself routes each documented operation to that pattern.
	for _, name := range documented {
		method, path, _ := strings.Cut(name, " ")
		concrete := strings.NewReplacer("{id}", "x1", "{principal_id}", "x2", "{key_id}", "x3").Replace(path)
		if _, got := a.mux.Handler(httptest.NewRequest(method, concrete, nil)); got != name {
			t.Errorf("%s %s is routed to %q, want %q", method, concrete, got, name)
		}
	}
}

// The document lists exactly the error codes of codeStatus, with their
// statuses, and every operation documents a response for each code it
// lists.
func TestOpenAPIErrorCodes(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t)
	comps := doc["components"].(map[string]any)
	var enum, codes []string
	for _, c := range comps["schemas"].(map[string]any)["ErrorCode"].(map[string]any)["enum"].([]any) {
		enum = append(enum, c.(string))
	}
	for c := range codeStatus {
		codes = append(codes, c)
	}
	sort.Strings(enum)
	sort.Strings(codes)
	if !slices.Equal(enum, codes) {
		t.Fatalf("ErrorCode enum %v, codeStatus %v", enum, codes)
	}
	responses := comps["responses"].(map[string]any)
	for c, st := range codeStatus {
		r, ok := responses[c].(map[string]any)
		if !ok || !strings.HasPrefix(r["description"].(string), fmt.Sprintf("%s (%d)", c, st)) {
			t.Errorf("components.responses.%s: %v", c, r)
		}
	}
	for name, op := range operations(doc) {
		listed := map[int][]string{}
		var list []string
		for _, c := range op["x-error-codes"].([]any) {
			st, ok := codeStatus[c.(string)]
			if !ok {
				t.Errorf("%s lists unknown code %s", name, c)
			}
			listed[st] = append(listed[st], c.(string))
			list = append(list, c.(string))
		}
		if !slices.Contains(list, "unauthorized") || !slices.Contains(list, "internal") {
			t.Errorf("%s does not list unauthorized and internal", name)
		}
		for key, v := range op["responses"].(map[string]any) {
			var st int
			fmt.Sscan(key, &st)
			if st < 400 {
				continue
			}
			r := v.(map[string]any)
			cs := listed[st]
			if len(cs) == 0 {
				t.Errorf("%s documents %d without a listed code", name, st)
			}
			for _, c := range cs {
				ref, _ := r["$ref"].(string)
				desc, _ := r["description"].(string)
				if ref != "#/components/responses/"+c && !strings.Contains(desc, c) {
					t.Errorf("%s: response %d does not name %s", name, st, c)
				}
			}
			delete(listed, st)
		}
		for st, cs := range listed {
			t.Errorf("%s lists %v but documents no %d response", name, cs, st)
		}
	}
}

// The schemas name exactly the JSON fields of the Go types the handlers
// decode and encode.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	schemas := loadDoc(t)["components"].(map[string]any)["schemas"].(map[string]any)
	types := map[string]any{
		"UpstreamCreateBody": UpstreamCreateBody{}, "UpstreamUpdateBody": UpstreamUpdateBody{}, "UpstreamPatchBody": UpstreamPatchBody{},
		"UpstreamResponse": UpstreamResponse{}, "UpstreamStatus": UpstreamStatus{}, "UpstreamModel": UpstreamModel{},
		"CreatePrincipalBody": CreatePrincipalBody{}, "PatchPrincipalBody": PatchPrincipalBody{}, "AllowedModelsBody": AllowedModelsBody{},
		"CacheKeepaliveBody": cacheKeepaliveBody{}, "KeepaliveClassifierBody": keepaliveClassifierBody{},
		"CacheKeepalive": CacheKeepalive{}, "KeepaliveClassifier": KeepaliveClassifier{}, "DefaultLimit": limit{},
		"PrincipalResponse": PrincipalResponse{}, "IssueKeyBody": IssueKeyBody{}, "IssuedKeyResponse": KeyResponse{},
		"PluginChainEntry": PluginChainEntry{}, "ChainListResponse": ChainListResponse{},
		"StatusResponse": StatusResponse{}, "SnapshotStatus": SnapshotStatus{}, "ExportResponse": ExportResponse{}, "ExportPrincipal": ExportPrincipal{},
		"RequestEventResponse": RequestEventResponse{}, "PriceCatalogResponse": PriceCatalogResponse{},
		"LimitResetsResponse": LimitResetObservation{}, "QuotaWindow": QuotaWindow{}, "CouponStatus": CouponStatus{}, "CouponFence": CouponFence{},
		"OAuthStartResponse": OAuthStartResponse{}, "OAuthCompleteBody": OAuthCompleteBody{}, "ClaimResponse": ClaimResponse{},
		"RegistryEntryResponse": RegistryEntryResponse{}, "RegistryListResponse": RegistryListResponse{},
		"RegistryReferencesResponse": RegistryReferencesResponse{}, "RegistryCascadeDeleteResponse": RegistryCascadeDeleteResponse{},
		"PatchRegistryBody": PatchRegistryBody{}, "InsertChainBody": InsertChainBody{}, "ReorderBody": ReorderBody{},
		"PluginChainEntryUpdate": PluginChainEntryUpdate{}, "UsageRollupResponse": UsageRollupResponse{},
		"UsageResponse": UsageResponse{}, "UsageRow": UsageRow{}, "UsageTotals": UsageTotals{}, "ModelUsage": ModelUsage{}, "PrincipalUsage": PrincipalUsage{},
		"MeResponse": MeResponse{}, "CreateAdminTokenBody": CreateAdminTokenBody{}, "AdminTokenResponse": AdminTokenResponse{},
		"AuditResponse": AuditResponse{}, "AuditEntryResponse": AuditEntryResponse{},
		"WebhookBody": WebhookBody{}, "WebhookResponse": WebhookResponse{}, "WebhookDelivery": WebhookDelivery{},
		"AlertResponse": AlertResponse{}, "CapturedExchangeResponse": CapturedExchangeResponse{},
	}
	for name, v := range types {
		s, ok := schemas[name].(map[string]any)
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		var documented []string
		for p := range s["properties"].(map[string]any) {
			documented = append(documented, p)
		}
		fields := jsonFields(reflect.TypeOf(v))
		sort.Strings(documented)
		sort.Strings(fields)
		if !slices.Equal(documented, fields) {
			t.Errorf("%s: schema %v, Go %v", name, documented, fields)
		}
	}
	// KeyResponse is IssuedKeyResponse without the plaintext.
	var kr []string
	for p := range schemas["KeyResponse"].(map[string]any)["properties"].(map[string]any) {
		kr = append(kr, p)
	}
	if slices.Contains(kr, "key") || len(kr) != len(jsonFields(reflect.TypeOf(KeyResponse{})))-1 {
		t.Errorf("KeyResponse properties %v", kr)
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name := strings.Split(f.Tag.Get("json"), ",")[0]; name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}
