package admin_test

import (
	"context"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// The upstream's status says whether it is routed to and, when not, why;
// an upstream whose refresh grant the provider refused reads
// refresh_refused, to a viewer too, in the list, the item and the
// overview. Turning warm-up on is still answered as before.
func TestUpstreamStatusShowsRoutingExclusion(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	sub := e.oauthUpstream("sub")["id"].(string)
	key := e.upstream("key")["id"].(string)
	status := func(id string, hdr ...string) map[string]any {
		t.Helper()
		r := e.do("GET", "/admin/v1/upstreams/"+id, nil, hdr...)
		if r.status != 200 {
			t.Fatalf("GET: %d %s", r.status, r.body)
		}
		return r.json(t)["status"].(map[string]any)
	}
	want := func(where string, s map[string]any, routable bool, reason any) {
		t.Helper()
		if s["routable"] != routable || s["unroutable_reason"] != reason {
			t.Fatalf("%s: routable %v, unroutable_reason %v; want %v, %v", where, s["routable"], s["unroutable_reason"], routable, reason)
		}
	}
	want("oauth before the flow", status(sub), false, "no_credential")
	want("api key", status(key), true, nil)

	ct, _ := e.box.Seal([]byte(`{"access_token":"at","refresh_token":"rt"}`), credential.AD(sub, store.KindVendorOAuth, "https://api.example", ""))
	u, err := e.st.SetUpstreamCredential(ctx, sub, "oauth", ct)
	if err != nil {
		t.Fatal(err)
	}
	want("oauth connected", status(sub), true, nil)
	if ok, err := e.st.RecordRefreshFailure(ctx, sub, u.CredentialVersion, "OAuth token refresh refused by the provider (invalid_grant); run the OAuth flow again", true, now); err != nil || !ok {
		t.Fatalf("record refusal: %v %v", ok, err)
	}
	viewer := bearer(e.roleToken("viewer"))
	want("refused, as a viewer", status(sub, viewer...), false, "refresh_refused")
	var listed map[string]any
	for _, x := range e.do("GET", "/admin/v1/upstreams", nil, viewer...).list(t) {
		if m := x.(map[string]any); m["id"] == sub {
			listed = m["status"].(map[string]any)
		}
	}
	want("refused, listed", listed, false, "refresh_refused")
	var ov map[string]any
	for _, x := range e.do("GET", "/admin/v1/overview", nil, viewer...).json(t)["upstreams"].([]any) {
		if m := x.(map[string]any); m["id"] == sub {
			ov = m
		}
	}
	want("refused, overview", ov, false, "refresh_refused")

	// The warm-up flag is the operator's wish: accepted as before.
	r := e.do("PATCH", "/admin/v1/upstreams/"+sub, map[string]any{"warmup_enabled": false}, "If-Match", `"1"`)
	if r.status != 200 {
		t.Fatalf("warm-up off: %d %s", r.status, r.body)
	}
	r = e.do("PATCH", "/admin/v1/upstreams/"+sub, map[string]any{"warmup_enabled": true}, "If-Match", `"2"`)
	if r.status != 200 || r.json(t)["warmup_enabled"] != true {
		t.Fatalf("warm-up on: %d %s", r.status, r.body)
	}
	// Disabled: named as such; a refused grant is named before it.
	if r := e.do("POST", "/admin/v1/upstreams/"+key+"/disable", nil); r.status != 200 {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	want("disabled", status(key), false, "disabled")
	if r := e.do("POST", "/admin/v1/upstreams/"+sub+"/disable", nil); r.status != 200 {
		t.Fatalf("disable: %d %s", r.status, r.body)
	}
	want("refused and disabled", status(sub), false, "refresh_refused")

	// The flow run again (a new credential) clears it.
	if _, err := e.st.SetUpstreamCredential(ctx, sub, "oauth", ct); err != nil {
		t.Fatal(err)
	}
	if r := e.do("POST", "/admin/v1/upstreams/"+sub+"/enable", nil); r.status != 200 {
		t.Fatalf("enable: %d %s", r.status, r.body)
	}
	want("reconnected", status(sub), true, nil)
}
