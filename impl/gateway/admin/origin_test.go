package admin_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/credential"
)

// A stored API key goes only to the origin it was given for: PATCH or PUT
// of a base_url on another origin without the key is refused with
// credential_required and changes nothing; with the key (api_key_value or
// api_key_env) in the same request the move succeeds, and the new key is
// sealed for the new origin only.
func TestUpstreamMoveNeedsTheKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.upstream("u")["id"].(string)
	p := "/admin/v1/upstreams/" + id
	e.unchanged("moves without the key", func() {
		for _, other := range []string{"https://evil.example", "http://api.example", "https://api.example:8443/v1"} {
			r := e.do("PATCH", p, map[string]any{"base_url": other}, "If-Match", "*")
			wantErr(t, r, 400, "credential_required")
			wantMessage(t, r, "api_key_value")
			wantErr(t, e.do("PUT", p, map[string]any{"name": "u", "base_url": other}), 400, "credential_required")
		}
	})
	if su := e.rt.Current().Upstream(id); su.BaseURL != "https://api.example" || su.Credential != "sk-ant-value-u" {
		t.Fatalf("snapshot after refused moves: %s %s", su.BaseURL, su.Credential)
	}

	r := e.do("PATCH", p, map[string]any{"base_url": "https://moved.example", "api_key_value": "sk-ant-moved"}, "If-Match", "*")
	if r.status != 200 || r.json(t)["base_url"] != "https://moved.example" || r.json(t)["has_credential"] != true {
		t.Fatalf("move with the key: %d %s", r.status, r.body)
	}
	if strings.Contains(string(r.body), "sk-ant-moved") {
		t.Fatal("the key is echoed")
	}
	if su := e.rt.Current().Upstream(id); su.BaseURL != "https://moved.example" || su.Credential != "sk-ant-moved" {
		t.Fatalf("snapshot after the move: %s %s", su.BaseURL, su.Credential)
	}
	stored, err := e.st.GetUpstream(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.box.Open(stored.Credential, credential.AD(id, stored.Kind, "https://api.example", "")); err == nil {
		t.Fatal("the new key opens for the old origin")
	}

	// api_key_env names the key again just as well; it is read once.
	before := e.getenvCalls["OTHER_KEY"]
	r = e.do("PATCH", p, map[string]any{"base_url": "https://third.example/v1", "api_key_env": "OTHER_KEY"}, "If-Match", "*")
	if r.status != 200 || e.getenvCalls["OTHER_KEY"] != before+1 || e.rt.Current().Upstream(id).Credential != serverEnv["OTHER_KEY"] {
		t.Fatalf("move with api_key_env: %d %s", r.status, r.body)
	}
	// A key alone replaces the key; a path on the same origin needs none.
	if r = e.do("PATCH", p, map[string]any{"api_key_value": "sk-ant-alone"}, "If-Match", "*"); r.status != 200 || e.rt.Current().Upstream(id).Credential != "sk-ant-alone" {
		t.Fatalf("key alone: %d %s", r.status, r.body)
	}
	if r = e.do("PATCH", p, map[string]any{"base_url": "https://THIRD.example:443/v2"}, "If-Match", "*"); r.status != 200 || e.rt.Current().Upstream(id).Credential != "sk-ant-alone" {
		t.Fatalf("same-origin move: %d %s", r.status, r.body)
	}
	e.unchanged("refused key fields", func() {
		wantErr(t, e.do("PATCH", p, map[string]any{"api_key_value": ""}, "If-Match", "*"), 400, "invalid_request")
		wantErr(t, e.do("PATCH", p, map[string]any{"api_key_value": "k", "api_key_env": "OTHER_KEY"}, "If-Match", "*"), 400, "conflicting_api_key")
		wantErr(t, e.do("PATCH", p, map[string]any{"base_url": "https://x.example", "api_key_env": "PROXY_MASTER_KEY"}, "If-Match", "*"), 400, "api_key_env_not_allowed")
	})
}

// An OAuth token bundle goes to the base_url (access token) and the token
// endpoint (refresh token): while one is held, moving either is refused
// with credential_required (the flow is the only way to give a credential
// again); once revoked, the upstream moves.
func TestOAuthUpstreamMoveNeedsANewFlow(t *testing.T) {
	t.Parallel()
	e := setup(t)
	id := e.oauthUpstream("sub")["id"].(string)
	ctx := context.Background()
	cur, err := e.st.GetUpstream(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ct, _ := e.box.Seal([]byte(`{"access_token":"at","refresh_token":"rt"}`), credential.UpstreamAD(cur))
	if _, err := e.st.SetUpstreamCredential(ctx, id, credential.OAuth, ct); err != nil {
		t.Fatal(err)
	}
	p := "/admin/v1/upstreams/" + id
	e.unchanged("OAuth moves", func() {
		r := e.do("PATCH", p, map[string]any{"base_url": "https://evil.example"}, "If-Match", "*")
		wantErr(t, r, 400, "credential_required")
		wantMessage(t, r, "oauth/revoke")
		wantErr(t, e.do("PUT", p, map[string]any{"name": "sub", "base_url": "https://evil.example"}), 400, "credential_required")
		wantErr(t, e.do("PUT", p, map[string]any{"name": "sub", "base_url": "https://api.example", "oauth_token_url": "https://evil.example/token"}), 400, "credential_required")
		// No key can stand in for the flow.
		wantErr(t, e.do("PATCH", p, map[string]any{"base_url": "https://evil.example", "api_key_value": "k"}, "If-Match", "*"), 400, "invalid_request")
	})
	if _, err := e.st.SetUpstreamCredential(ctx, id, "", nil); err != nil {
		t.Fatal(err)
	}
	r := e.do("PUT", p, map[string]any{"name": "sub", "base_url": "https://moved.example", "oauth_token_url": "https://auth.moved.example/token"})
	if r.status != 200 || r.json(t)["base_url"] != "https://moved.example" {
		t.Fatalf("move after revoke: %d %s", r.status, r.body)
	}
}
